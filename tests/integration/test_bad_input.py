"""Bad input against one real master process: random and malformed messages for every RPC of every
service, random bytes on the wire, edge values, over-limit sizes, bad worker messages and records that
cannot be shown. Every call is answered with a status that names what is wrong — never UNKNOWN or
INTERNAL, never a silently closed stream — and afterwards the master is up, lists, and holds no task
leased to a worker that is gone.
"""

from __future__ import annotations

import queue
import subprocess
import sys
from typing import Iterator

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_messages import Rpc, every_rpc, requests
from harness import Cluster, RedisServer, wait_for
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

NAMESPACE = "badinput"
# The master's message limit here: above a 16 MB argument (so --max-args refuses it) and small enough that
# a request over it is cheap to build.
MAX_MESSAGE = 20 << 20
# Statuses that say something definite about a bad call; UNKNOWN and INTERNAL mean it escaped the checks.
ANSWERS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAVAILABLE}
# Each call's deadline: WaitRun and a followed log may legitimately wait longer than the fuzzing should.
CALL_DEADLINE_S = 3.0
# Worker leases of the harness's masters are 4 s: a fuzzed worker's tasks are back within a few of them.
LEAK_WAIT_S = 40.0
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])


@pytest.fixture(scope="module")
def master(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(redis_server.url, tmp_path_factory.mktemp(NAMESPACE), namespace=NAMESPACE)
    cluster.start_master("--max-message", str(MAX_MESSAGE))
    yield cluster  # a failing test's message carries what matters; the master's log is in the module's tmp dir
    cluster.stop()


@pytest.fixture(scope="module")
def channel(master: Cluster) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(master.address, options=[("grpc.max_receive_message_length", 64 << 20)]) as ch:
        yield ch


@pytest.fixture(scope="module")
def known_ids(channel: grpc.Channel) -> list[str]:
    """Ids that exist (a delayed job; a job that fired, its run and task), so fuzzed calls reach past the id
    check; and a cron job, so listings have something recurring to render."""
    jobs = pbg.JobServiceStub(channel)
    delayed = pb.JobSpec(entrypoint="m.mod:main")
    delayed.trigger.delay.FromSeconds(3600)
    cron = pb.JobSpec(entrypoint="m.mod:main", trigger=pb.Trigger(cron=pb.Trigger.Cron(expr="0 3 * * *")))
    fired = jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(entrypoint="m.mod:main"))).job
    out = [jobs.SubmitJob(pb.SubmitJobRequest(spec=s)).job.id for s in (delayed, cron)]
    return [*out, fired.id, fired.last_run_id, f"{fired.last_run_id}.00000"]


def call(channel: grpc.Channel, rpc: Rpc, encoded: list[bytes]) -> tuple[grpc.StatusCode, str]:
    """Send already encoded requests on ``rpc`` (identity serializers: the bytes go on the wire as they
    are); the status and its message."""
    try:
        if rpc.client_streaming and rpc.server_streaming:
            for _ in channel.stream_stream(rpc.path)(iter(encoded), timeout=CALL_DEADLINE_S):
                pass
        elif rpc.client_streaming:
            channel.stream_unary(rpc.path)(iter(encoded), timeout=CALL_DEADLINE_S)
        elif rpc.server_streaming:
            for _ in channel.unary_stream(rpc.path)(encoded[0], timeout=CALL_DEADLINE_S):
                pass
        else:
            channel.unary_unary(rpc.path)(encoded[0], timeout=CALL_DEADLINE_S)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def assert_answered(code: grpc.StatusCode, message: str, what: str) -> None:
    if code in (grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED):
        return
    assert code in ANSWERS, f"{what}: {code.name} {message[:300]!r}"
    assert message and len(message) < 5000, f"{what}: {code.name} with message {message[:300]!r}"


def a_register(worker_id: str, slots: int = 1) -> bytes:
    return pb.WorkerMessage(register=pb.Register(worker_id=worker_id, slots=slots)).SerializeToString()


# ---- every RPC ----------------------------------------------------------------------------------------


def test_every_rpc_the_master_serves_is_fuzzed(channel: grpc.Channel) -> None:
    """The fuzzed RPCs are derived from the descriptors; this checks them against what the running master
    says it serves (reflection), so a service registered from elsewhere cannot be missed."""
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    answer = next(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    served = {s.name for s in answer.list_services_response.service if s.name.startswith("sparkyard.")}
    fuzzed = {rpc.path for rpc in every_rpc()}
    for name in served:
        methods = pb.DESCRIPTOR.services_by_name[name.rsplit(".", 1)[1]].methods
        assert {f"/{name}/{m.name}" for m in methods} <= fuzzed
    assert {path.split("/")[1] for path in fuzzed} == served


@pytest.mark.parametrize("rpc", every_rpc(), ids=lambda rpc: rpc.path.rsplit("/", 1)[1])
def test_random_requests_are_answered_with_a_status_naming_the_problem(
        rpc: Rpc, channel: grpc.Channel, known_ids: list[str]) -> None:
    encoded = requests(rpc, known_ids)
    if rpc.path.endswith("/Connect"):  # half of the streams register first, so later messages are read
        encoded = encoded | st.tuples(st.uuids(), encoded).map(lambda p: [a_register(f"fuzz-{p[0]}"), *p[1]])

    @FUZZ
    @given(encoded)
    def fuzz(sent: list[bytes]) -> None:
        code, message = call(channel, rpc, sent)
        assert_answered(code, message, rpc.path)

    fuzz()


@pytest.mark.parametrize("rpc", every_rpc(), ids=lambda rpc: rpc.path.rsplit("/", 1)[1])
def test_random_bytes_on_the_wire_are_invalid_argument(rpc: Rpc, channel: grpc.Channel) -> None:
    corrupt = b"\x0a\xff\xff\xff\xff\x0f" + bytes(range(20))  # a length prefix past the end of the message
    code, message = call(channel, rpc, [corrupt])
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, message)
    assert f"request is not a valid sparkyard.v1.{rpc.method.input_type.name}" in message


# ---- edge values and limits -----------------------------------------------------------------------------


def submit_status(channel: grpc.Channel, spec: pb.JobSpec) -> tuple[grpc.StatusCode, str]:
    rpc = next(r for r in every_rpc() if r.path.endswith("/SubmitJob"))
    return call(channel, rpc, [pb.SubmitJobRequest(spec=spec).SerializeToString()])


@pytest.mark.parametrize(("change", "field"), [
    (lambda s: setattr(s.timeout, "seconds", 10**12), "timeout"),
    (lambda s: setattr(s.trigger.delay, "seconds", 10**11), "trigger.delay"),
    (lambda s: setattr(s.trigger.at, "seconds", 400_000_000_000), "trigger.at"),
    (lambda s: setattr(s.trigger.every.interval, "seconds", 10**15), "trigger.every.interval"),
    (lambda s: setattr(s.retry, "multiplier", float("nan")), "retry.multiplier"),
    (lambda s: setattr(s, "misfire", 99), "misfire"),
    (lambda s: setattr(s, "routing", 42), "routing"),
    (lambda s: setattr(s, "group", "x" * 100_000), "group"),
])
def test_an_edge_value_at_submit_is_invalid_argument_naming_the_field(channel: grpc.Channel, change: object,
                                                                     field: str) -> None:
    spec = pb.JobSpec(entrypoint="m.mod:main")
    change(spec)  # type: ignore[operator]
    code, message = submit_status(channel, spec)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and field in message, (code, message)
    assert len(message) < 500, "a bad value is quoted in full"


def test_a_16_mb_argument_is_refused_naming_the_limit_and_its_flag(channel: grpc.Channel) -> None:
    code, message = submit_status(channel, pb.JobSpec(entrypoint="m.mod:main", args=["a" * (16 << 20)]))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert message == "args: 16.0 MiB in all is over the master's limit of 1.0 MiB (--max-args)"


def test_a_request_over_the_message_limit_is_refused_naming_its_flag(channel: grpc.Channel) -> None:
    code, message = submit_status(channel, pb.JobSpec(entrypoint="m.mod:main", args=["a" * (MAX_MESSAGE + 100)]))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "over the master's limit of 20.0 MiB (--max-message)" in message


def test_a_bad_worker_message_ends_the_stream_with_invalid_argument_and_a_message(master: Cluster,
                                                                              channel: grpc.Channel) -> None:
    """The worker holds a task when it sends the bad message: the last test sees that task come back. (A
    task of its own is made ready first: the fuzzed workers' ones may still be leased, and this worker
    sends no heartbeats, so it must get its task before the master gives it up as silent.)"""
    pbg.JobServiceStub(channel).SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(entrypoint="m.mod:main")))
    outbox: queue.Queue[pb.WorkerMessage | None] = queue.Queue()
    outbox.put(pb.WorkerMessage(register=pb.Register(worker_id="bad-reporter", slots=1)))
    with grpc.insecure_channel(master.address) as ch:
        stream = pbg.WorkerServiceStub(ch).Connect(iter(outbox.get, None), timeout=30)
        assert next(stream).WhichOneof("kind") == "registered"
        batch = next(m for m in stream if m.WhichOneof("kind") == "batch").batch
        assert batch.tasks, "the job fired for the module holds a ready task"
        outbox.put(pb.WorkerMessage(reports=pb.Reports(results=[pb.TaskResult(task_id="t", outcome=77)])))  # type: ignore[list-item]
        with pytest.raises(grpc.RpcError) as err:
            for _ in stream:
                pass
        outbox.put(None)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith("reports.results[0].outcome: 77 is not a AttemptState")


@pytest.mark.parametrize("char", ["x", "é", "%", "\U0001f600"])
def test_a_200_kb_worker_id_to_drain_is_answered_not_found_within_the_metadata_limit(channel: grpc.Channel,
                                                                                      char: str) -> None:
    """gRPC sends the message percent-encoded in a header: cut by characters, 4000 of a non-ASCII one were
    up to 48 KB on the wire and the client got "Stream removed" instead of the error."""
    with pytest.raises(grpc.RpcError) as err:
        pbg.ClusterServiceStub(channel).DrainWorker(pb.DrainWorkerRequest(worker_id=char * 200_000), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value.details()
    assert "is not connected to this master" in (err.value.details() or "")


def test_a_cli_verb_answers_a_huge_bad_id_with_one_short_line(master: Cluster) -> None:
    done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", master.address, "job",
                           "j" + "x" * 100_000], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "job_id" in lines[0] and "100,001 characters" in lines[0] and len(lines[0]) < 500


def test_a_stored_record_that_cannot_be_shown_does_not_break_listings(
        master: Cluster, channel: grpc.Channel, redis_server: RedisServer) -> None:
    """One job written straight into Redis with a fire time past year 9999, one with a state no version
    knows: listings still answer, show the first without its fire time and leave the second out; asked for by
    id, the second is an error naming it (DATA_LOSS), not an internal error."""
    r = redis_server.client()
    jobs = pbg.JobServiceStub(channel)
    later = pb.JobSpec(entrypoint="m.mod:main")
    later.trigger.delay.FromSeconds(3600)
    mine = jobs.SubmitJob(pb.SubmitJobRequest(spec=later)).job.id  # the fuzzing may have deleted the known ones
    good = r.hgetall(f"{NAMESPACE}:job:{mine}")
    assert good, "the job hash's key format changed: update this test"
    far, unknown = "j" + "f" * 20 + "1", "j" + "f" * 20 + "2"
    r.hset(f"{NAMESPACE}:job:{far}", mapping={**good, "next_fire_ms": str(10**18)})
    r.hset(f"{NAMESPACE}:job:{unknown}", mapping={**good, "state": "EXPLODED"})
    r.zadd(f"{NAMESPACE}:jobs", {far: 10**13, unknown: 10**13})
    try:
        for _ in range(2):  # the second listing meets them again: still fine, logged once
            listed = {j.id: j for j in jobs.ListJobs(pb.ListJobsRequest(limit=1000)).jobs}
            assert mine in listed and unknown not in listed
            assert far in listed and not listed[far].HasField("next_fire_at")
        assert master.master is not None
        assert master.master.log().count(f"record {unknown} cannot be read") == 1
        with pytest.raises(grpc.RpcError) as read:
            jobs.GetJob(pb.GetJobRequest(job_id=unknown))
        assert read.value.code() == grpc.StatusCode.DATA_LOSS
        assert f"job {unknown}: its stored record cannot be read (ValueError: 'EXPLODED'" in read.value.details()
    finally:
        r.delete(f"{NAMESPACE}:job:{far}", f"{NAMESPACE}:job:{unknown}")
        r.zrem(f"{NAMESPACE}:jobs", far, unknown)


# ---- afterwards ----------------------------------------------------------------------------------------


def test_after_the_fuzzing_the_master_is_up_lists_and_leaks_no_task(master: Cluster, channel: grpc.Channel) -> None:
    assert master.master is not None and master.master.process.poll() is None
    jobs, cluster = pbg.JobServiceStub(channel), pbg.ClusterServiceStub(channel)
    # Fuzzed DeleteJob and Cancel calls may have hit the known jobs (their ids are among the values drawn):
    # what is left must list, with its runs and tasks.
    listed = jobs.ListJobs(pb.ListJobsRequest(limit=10_000)).jobs
    for job in listed:
        jobs.ListRuns(pb.ListRunsRequest(job_id=job.id, with_tasks=True))

    def no_task_leased_without_a_worker() -> bool:
        status = cluster.GetStatus(pb.GetStatusRequest())
        held = sum(len(w.tasks) for w in cluster.ListWorkers(pb.ListWorkersRequest()).workers if w.alive)
        return status.leased == held

    wait_for(no_task_leased_without_a_worker, LEAK_WAIT_S, "every leased task to be held by a live worker")
    log = master.master.log()
    assert "Traceback" not in log, log[log.index("Traceback") - 500:][:3000]
