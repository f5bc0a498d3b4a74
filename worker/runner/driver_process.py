"""One warm driver process of the session runner's pool: its start, its socket and its end.

The pool (worker/runner/session.py) decides which driver runs which attempt; this module only speaks the
driver's protocol (worker/driver.py) and cleans up after its process: the process group (its JVM and
anything an attempt started) and its JVM's temporary files.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from sparkyard.worker import jvm_temp
from sparkyard.worker.children import Children, tree_rss
from sparkyard.worker.logs import ATTEMPT_HEADER, LogFiles, attempt_range
from sparkyard.worker.runner.base import AttemptRun, Outcome, jvm_reason

log = logging.getLogger(__name__)

# How long a cancelled attempt may take to stop before its driver is killed (and replaced).
KILL_GRACE_S = 3.0
# The longest line on a driver's socket (a result is at most the result limit, plus a traceback).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def describe_exit(code: int | None) -> str:
    if code is None:
        return "ended"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with exit code {code}"


@dataclass(eq=False)
class Job:
    attempt: AttemptRun
    done: Callable[[Outcome], None]
    key: str
    driver: DriverProcess | None = None
    failure: str = ""  # why the runner ended it (memory limit, kill); set before the driver is killed
    fresh: list[str] = field(default_factory=list)  # conf a warm driver cannot give it: it runs on a fresh one
    queued_at: float = field(default_factory=time.monotonic)


def run_message(job: Job, kind: str, notices: list[str], conf: dict[str, str]) -> dict[str, Any]:
    """The driver's run message for ``job``, with the first lines of its log: where it runs (``kind``: what
    the log calls its process) and what the runner cannot do for it (``notices``); ``conf``: the Spark conf
    the job asks for."""
    attempt = job.attempt
    a = attempt.assignment
    ws = attempt.workspace
    header = (f"{ATTEMPT_HEADER}{a.attempt} of task {a.task_id} (token {a.fencing_token}) on worker "
              f"{attempt.worker_id}, {kind} {job.driver.number if job.driver else '?'} "
              f"(pid {job.driver.proc.pid if job.driver and job.driver.proc else '?'}), cwd {ws.cwd}\n")
    if job.fresh:
        header += (f"sparkyard: this driver was started for this attempt with the job's conf: a warm driver's "
                   f"JVM cannot take {', '.join(job.fresh)}\n")
    header += "".join(f"sparkyard: warning: {notice}\n" for notice in notices)
    return {
        "op": "run", "id": job.key, "entrypoint": ws.entrypoint, "sys_path": list(ws.sys_path), "cwd": ws.cwd,
        "archive": ws.archive, "executor_path": list(ws.executor_path), "py_files": list(ws.py_files),
        "files": list(ws.files), "fresh": bool(job.fresh),
        # The context travels once, as the SPARKYARD_TASK variable the driver sets anyway.
        "env": {**dict(a.spec.env), **attempt.context_env()}, "conf": conf,
        "context_id": f"{a.task_id}.a{a.attempt}", "log_path": job.driver.attempts_log if job.driver else "",
        "header": header,
        "result_max_bytes": attempt.result_max_bytes,
    }


def outcome_of(done: dict[str, Any]) -> Outcome:
    """The outcome a driver's ``done`` message reports for an attempt it ran (or could not start)."""
    if done.get("ok"):
        return Outcome("SUCCEEDED", result_json=done.get("result_json", ""))
    if done.get("no_space"):  # its log could not be made: handed back unstarted (worker/slots.py)
        error = done.get("error", "no space")
        return Outcome("FAILED", error=error, no_space=OSError(errno.ENOSPC, error))
    return Outcome("FAILED", error=done.get("error", "failed"), traceback=done.get("traceback", ""))


class _Channel(asyncio.Protocol):
    """The driver's socket, a JSON message a line, each handed to ``on_message`` as its bytes arrive: in the
    event loop's read callback, where a StreamReader's ``readline`` took a future and a task's wake-up per
    line (~10 % of the runner's own time per attempt, throughput_ceiling.py under py-spy). A line that is not
    JSON, one over MAX_MESSAGE_BYTES or a message its handler fails on breaks the channel: it is closed at once
    (the driver is then replaced) and nothing after it is handed on. ``closed`` is set when the socket is."""

    def __init__(self, number: int, on_message: Callable[[dict[str, Any]], None]) -> None:
        self._number = number
        self._on_message = on_message
        self._buffer = bytearray()
        self._scanned = 0  # the buffer's bytes already searched for a newline (none there)
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        while (end := buffer.find(b"\n", max(start, self._scanned))) >= 0:
            if end - start > MAX_MESSAGE_BYTES:
                self._broken(f"a message over {MAX_MESSAGE_BYTES} bytes")
                return
            try:
                message = json.loads(buffer[start:end])
            except ValueError as exc:
                self._broken(str(exc))
                return
            start = end + 1
            try:
                self._on_message(message)
            except Exception:
                log.exception("session driver %d: its %r message could not be handled", self._number,
                              message.get("op") if isinstance(message, dict) else message)
                self._broken("a message could not be handled")
                return
        del buffer[:start]
        self._scanned = len(buffer)
        if len(buffer) > MAX_MESSAGE_BYTES:
            self._broken(f"a message over {MAX_MESSAGE_BYTES} bytes")

    def write(self, data: bytes) -> None:
        """Send ``data`` unless the socket is gone or going (a message to an ended driver is moot)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _broken(self, why: str) -> None:
        log.warning("session driver %d: broken channel: %s", self._number, why)
        self._buffer.clear()
        self._scanned = 0
        if self.transport is not None:
            self.transport.abort()  # at once: close() would wait for writes a frozen driver never reads

    def connection_lost(self, exc: BaseException | None) -> None:
        if exc is not None:
            log.warning("session driver %d: broken channel: %s", self._number, exc)
        elif self._buffer:  # killed mid-message: its end never came
            log.warning("session driver %d: its channel ended within a message (%d bytes)", self._number,
                        len(self._buffer))
        if not self.closed.done():
            self.closed.set_result(None)


class Pool(Protocol):
    """What a driver process needs of its pool (the session runner, worker/runner/session.py): where and
    with what it starts, and who hears of its events. A protocol, so that this module does not import the
    pool that imports it."""

    spark_master: str
    frozen_limit_s: float
    children: Children
    drivers_dir: Path
    logs: LogFiles

    def driver_conf(self, driver: DriverProcess) -> dict[str, str]: ...

    def driver_ready(self, driver: DriverProcess) -> None: ...

    def driver_done(self, driver: DriverProcess, message: dict[str, Any]) -> None: ...

    def driver_ended(self, driver: DriverProcess, code: int | None) -> None: ...


class DriverProcess:
    """One driver process and the attempt it runs."""

    def __init__(self, runner: Pool, number: int, dedicated: Job | None = None) -> None:
        self.runner = runner
        self.number = number
        # The one job this driver was started for, with its conf (worker/runner/fresh.py); None: a pool driver.
        self.dedicated = dedicated
        self.proc: asyncio.subprocess.Process | None = None
        self._channel: _Channel | None = None  # the driver's socket
        self._control: socket.socket | None = None
        self.state = "starting"  # starting | ready | busy | leaving (told to exit) | dead
        self.retiring = False  # ran its share of attempts: leaves once a replacement is warm
        self.tasks_run = 0
        self.job: Job | None = None
        self.start_error = ""
        self.log_path = runner.drivers_dir / f"driver-{number}.log"  # its own output (Spark's, its JVM's)
        # The file its attempts' logs go to today and the end of the last attempt's range in it (worker/logs.py).
        self.attempts_log = ""
        self.attempts_log_end = 0
        self._log_generation = 0  # a file an attempt overwrote is set aside: the next is named anew
        self._log_from = 0
        self.temp_dir = runner.drivers_dir / f"driver-{number}.tmp"  # its JVM's (worker/jvm_temp.py)
        # The --files its SparkContext serves, by name (Spark keys them by name alone, for the context's life).
        self.files: dict[str, str] = {}
        self.class_archive: Path | None = None  # the class archive its JVM was given (worker/class_archive.py)

    def attempt_log(self) -> str:
        """The log path of the attempt handed to this driver now: its range of the driver's file of today,
        from where the last one ended (worker/logs.py)."""
        name = f"driver-{self.number}-{self.proc.pid if self.proc else 0}"
        path = self.runner.logs.driver_file(f"{name}-{self._log_generation}" if self._log_generation else name,
                                            time.time())
        if path != self.attempts_log:  # a new day (or a file a driver of the same number and pid began before)
            self.attempts_log, self.attempts_log_end = path, _size(path)
        return attempt_range(path, self.attempts_log_end)

    def attempt_logged(self, job: Job, done: dict[str, Any]) -> None:
        """The attempt ``job`` is done (or refused): its range as the driver wrote it."""
        if "log_end" not in done:  # not run: nothing of it is in the file, whose bytes from here are the next's
            job.attempt.log_path = ""
        elif "log_file" in done:  # it overwrote the file, now set aside as its log (worker/driver.py _logged)
            self._log_generation += 1
            job.attempt.log_path = attempt_range(done["log_file"], 0, done["log_end"])
        else:
            self.attempts_log_end = done["log_end"]
            job.attempt.log_path = attempt_range(self.attempts_log, done["log_start"], done["log_end"])

    def clashes(self, files: tuple[str, ...]) -> bool:
        """Whether one of ``files`` has a name this driver already serves from another path."""
        return any(self.files.get(os.path.basename(p), p) != p for p in files)

    async def start(self) -> None:
        runner = self.runner
        ours, theirs = socket.socketpair()  # the attempts and their ends (worker/driver.py)
        # Cancels, read while an attempt runs. Message by message (a send is whole or refused, never half a line
        # that would garble the next) and non-blocking (a frozen driver, which reads nothing, never holds the
        # event loop).
        self._control, control_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._control.setblocking(False)
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               jvm_temp.DIRECTORY_ENV: str(self.temp_dir)}
        with open(self.log_path, "ab") as logf:
            self._log_from = logf.tell()  # the log goes on across drivers of this number: this one's part
            self.proc = await runner.children.spawn(
                sys.executable, "-m", "sparkyard.worker.driver", f"{theirs.fileno()}:{control_theirs.fileno()}",
                str(os.getpid()), runner.spark_master, json.dumps(runner.driver_conf(self)),
                str(runner.frozen_limit_s), what="session driver",
                pass_fds=(theirs.fileno(), control_theirs.fileno()), stdin=asyncio.subprocess.DEVNULL, stdout=logf,
                stderr=asyncio.subprocess.STDOUT, env=env, cwd=runner.drivers_dir,
            )
        theirs.close()
        control_theirs.close()
        channel = self._channel = _Channel(self.number, self._message)
        try:
            await asyncio.get_running_loop().create_unix_connection(lambda: channel, sock=ours)
        except BaseException:  # spawned, but no channel to it: it goes now (the pool counts a failed start)
            ours.close()
            self.kill()
            await self._ended()
            raise
        log.info("session driver %d starting (pid %d)", self.number, self.proc.pid)
        try:
            await channel.closed  # the driver's messages arrive meanwhile (_message)
        finally:
            code = await self._ended()
            self.runner.driver_ended(self, code)

    def _message(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "done":
            self.runner.driver_done(self, message)
        elif op == "ready":
            self.state = "ready"
            log.info("session driver %d ready (pid %d, Spark %s)", self.number, message.get("pid", 0),
                     message.get("version", "?"))
            self.runner.driver_ready(self)
        elif op == "start_failed":
            self.start_error = message.get("error", "unknown error")
            reason = jvm_reason(str(self.log_path), self._log_from)
            if reason and reason not in self.start_error:
                self.start_error += f" ({reason})"

    async def _ended(self) -> int | None:
        if self._channel is not None:
            self._channel.close()
        if self._control is not None:
            self._control.close()
        proc = self.proc
        if proc is None:
            return None
        if proc.returncode is None:
            try:
                await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
            except asyncio.TimeoutError:
                Children.kill_group(proc.pid)
                await proc.wait()
        Children.kill_group(proc.pid)  # its JVM and anything the attempt started
        self.runner.children.forget(proc.pid)
        await asyncio.to_thread(jvm_temp.remove, self.temp_dir)
        return proc.returncode

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        if message["op"] == "cancel":  # read by the driver's control thread while the attempt runs
            if self._control is not None:
                try:
                    self._control.send(data)
                except OSError:  # gone (its end is being handled) or frozen: the kill after the grace stops it
                    pass
        elif self._channel is not None:
            self._channel.write(data)

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            Children.kill_group(self.proc.pid)

    def rss_bytes(self) -> int:
        return tree_rss(self.proc.pid) if self.proc is not None else 0

    async def enforce_memory(self, worker_limit_mb: int) -> None:
        """Kill this driver when its process tree (Python and its JVM) uses more than its attempt's limit (the
        job's --task-memory, else the worker's), failing the attempt with both figures."""
        job = self.job
        if job is None or job.failure:
            return
        limit = (job.attempt.assignment.spec.task_memory_mb or worker_limit_mb) * 1024 * 1024
        if not limit:
            return
        rss = await asyncio.to_thread(self.rss_bytes)
        if rss > limit and self.job is job:
            job.failure = (f"memory limit exceeded: its driver used {rss / 2**20:.0f} MiB, over the "
                           f"--task-memory limit of {limit / 2**20:.0f} MiB")
            log.warning("task=%s: %s", job.attempt.assignment.task_id, job.failure)
            self.kill()


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
