"""What one message on the worker ↔ master stream costs in CPU, apart from what it carries: the figure that
decides how many results a worker folds into a ``Reports`` message and how long the master holds
acknowledgements (worker/reports.py, master/reports.py).

    .venv/bin/python tests/bench/bench_grpc_stream.py [--rounds 3000] [--results 1,17,100]

A server in a child process answers every ``Reports`` message on a ``WorkerService.Connect`` stream (grpc.aio,
as the master's) with a ``ResultAcks`` message naming its results; this process (grpc.aio, as the worker's)
sends ``--rounds`` messages of each size, one at a time and ten in flight, and prints its own CPU per message
pair (one sent, one received) from ``getrusage``, and the same per result.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import subprocess
import sys
import time
from typing import AsyncIterator

import grpc

from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

IN_FLIGHT = 10
LOG_PATH = "/srv/sparkyard/work/logs/2026-11-29/driver-1-12345.log@123456-123789"


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Acknowledger(pbg.WorkerServiceServicer):
    async def Connect(self, request_iterator: AsyncIterator[pb.WorkerMessage],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.MasterMessage]:
        async for message in request_iterator:
            yield pb.MasterMessage(acks=pb.ResultAcks(acks=[
                pb.ResultAck(task_id=r.task_id, fencing_token=r.fencing_token, accepted=True)
                for r in message.reports.results]))


async def serve(port: int) -> None:
    server = grpc.aio.server()
    pbg.add_WorkerServiceServicer_to_server(Acknowledger(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


def reports(results: int) -> pb.WorkerMessage:
    return pb.WorkerMessage(reports=pb.Reports(results=[
        pb.TaskResult(task_id=f"r0123456789abcdef0123-{i:05d}", fencing_token=123_456 + i,
                      outcome=pb.ATTEMPT_SUCCEEDED, log_path=LOG_PATH) for i in range(results)]))


async def measure(port: int, rounds: int, sizes: list[int]) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        outbound: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()

        async def requests() -> AsyncIterator[pb.WorkerMessage]:
            while (message := await outbound.get()) is not None:
                yield message

        call = pbg.WorkerServiceStub(channel).Connect(requests())
        print("| results a message | one at a time: CPU µs per message pair | per result | "
              f"{IN_FLIGHT} in flight: CPU µs per pair | per result |")
        print("|---|---|---|---|---|")
        for size in sizes:
            message = reports(size)
            for _ in range(50):  # warm-up
                outbound.put_nowait(message)
                await call.read()
            started = cpu_s()
            for _ in range(rounds):
                outbound.put_nowait(message)
                await call.read()
            alone = (cpu_s() - started) / rounds * 1e6
            started = cpu_s()
            for _ in range(rounds // IN_FLIGHT):
                for _ in range(IN_FLIGHT):
                    outbound.put_nowait(message)
                for _ in range(IN_FLIGHT):
                    await call.read()
            batched = (cpu_s() - started) / (rounds // IN_FLIGHT * IN_FLIGHT) * 1e6
            print(f"| {size} | {alone:.0f} | {alone / size:.1f} | {batched:.0f} | {batched / size:.1f} |")
        outbound.put_nowait(None)
        call.cancel()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--results", default="1,17,100", help="results per message, comma-separated")
    parser.add_argument("--serve", type=int, default=0, help=argparse.SUPPRESS)  # the child: the server's port
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        return 0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise SystemExit("the server did not start")
        print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
              f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
        asyncio.run(measure(port, args.rounds, [int(s) for s in args.results.split(",")]))
    finally:
        server.kill()
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
