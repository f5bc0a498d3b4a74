"""The gRPC servicers: proto in, domain call, proto out — and every domain error mapped to a status code
in one place (:func:`status_of`).
"""

from __future__ import annotations

import functools
import logging
import socket
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

import grpc
import redis.exceptions

from sparkyard import __version__
from sparkyard.errors import ANSWERED_METADATA, InvalidArgument, SparkyardError, clip
from sparkyard.master.backfill import Backfiller
from sparkyard.master.bundles import BundleStore, check_ref
from sparkyard.master.connection import WorkerConnection
from sparkyard.master.convert import job_to_proto, run_to_proto
from sparkyard.master.registry import WorkerRegistry
from sparkyard.master.jobs import JobManager
from sparkyard.master.run_waits import RunWaits
from sparkyard.master.leader import Leadership
from sparkyard.master.logs import LogRelay
from sparkyard.master.scripts import Fenced
from sparkyard.master.store import Store
from sparkyard.states import JobState, TaskState, from_proto
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

log = logging.getLogger(__name__)

R = TypeVar("R")
# Redis errors that pass with a failover: a primary without its replicas (min-replicas-to-write), a node
# demoted under the caller, a replica that lost its primary.
REDIS_REFUSALS_FOR_NOW = ("NOREPLICAS", "READONLY", "MASTERDOWN")


ANSWERED = ((ANSWERED_METADATA, "1"),)


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The status code and message of a domain error (None: not one; a bug). The console's API maps the
    same codes to HTTP statuses."""
    if isinstance(exc, SparkyardError):
        return grpc.StatusCode[exc.code_name], str(exc)
    if isinstance(exc, Fenced) or (isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("FENCED")):
        return grpc.StatusCode.UNAVAILABLE, f"this master no longer leads ({exc}); retry: another one does"
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return grpc.StatusCode.UNAVAILABLE, f"redis unavailable: {exc}"
    if isinstance(exc, redis.exceptions.ResponseError) and any(w in str(exc) for w in REDIS_REFUSALS_FOR_NOW):
        return grpc.StatusCode.UNAVAILABLE, f"redis refuses writes for now (a failover?); retry: {exc}"
    if isinstance(exc, redis.exceptions.ResponseError) and "OOM" in str(exc):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, f"redis is out of memory (noeviction): {exc}"
    return None


async def _abort(context: grpc.aio.ServicerContext, exc: Exception, what: str) -> None:
    """End the call with the status of ``exc``: a domain error's own, else INTERNAL (and logged)."""
    status = status_of(exc)
    if status is None:
        log.error("%s failed", what, exc_info=exc)
        status = (grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
    code, message = status
    await context.abort(code, clip(message), trailing_metadata=ANSWERED)


def mapped(method: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Turn domain errors of a unary handler into gRPC statuses; anything else is INTERNAL (and logged)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await method(self, request, context)
        except Exception as exc:
            await _abort(context, exc, method.__name__)
            raise AssertionError("unreachable: abort raises") from exc

    return wrapper


async def backfill(jobs: JobManager, backfiller: Backfiller, request: pb.BackfillRequest) -> pb.BackfillResponse:
    """A backfill plan for the job (the gRPC API's and the console's: one way in)."""
    for name in ("start", "end"):
        if not request.HasField(name):
            raise InvalidArgument(f"{name}: required (a time)")
    job = await jobs.get_job(request.job_id)
    plan = await backfiller.plan(job, request.start.ToMilliseconds(), request.end.ToMilliseconds(),
                                 request.max_concurrent or 1)
    reply = pb.BackfillResponse(planned=plan.planned, added=plan.added, pending=plan.pending)
    reply.first.FromMilliseconds(plan.first_ms)
    reply.last.FromMilliseconds(plan.last_ms)
    return reply


def _state_filter(state: int) -> JobState | None:
    return None if state == pb.JOB_STATE_UNSPECIFIED else from_proto(JobState, pb.JobState.Name(state))


class JobService(pbg.JobServiceServicer):
    def __init__(self, jobs: JobManager, run_waits: RunWaits, logs: LogRelay, backfiller: Backfiller) -> None:
        self._jobs = jobs
        self._run_waits = run_waits
        self._logs = logs
        self._backfiller = backfiller

    @mapped
    async def SubmitJob(self, request: pb.SubmitJobRequest, context: grpc.aio.ServicerContext) -> pb.SubmitJobResponse:
        masked = request.HasField("read_mask")
        if masked and not request.read_mask.IsValidForDescriptor(pb.Job.DESCRIPTOR):
            raise InvalidArgument(f"read_mask: {', '.join(request.read_mask.paths)} names no field of Job")
        done = await self._jobs.submit(request.spec, request.idempotency_key)
        job = job_to_proto(done.job, with_spec=not masked or any(p.startswith("spec") for p in request.read_mask.paths))
        if masked:
            job, full = pb.Job(), job
            request.read_mask.MergeMessage(full, job)
        return pb.SubmitJobResponse(job=job, duplicate=done.duplicate)

    @mapped
    async def SubmitJobs(self, request: pb.SubmitJobsRequest, context: grpc.aio.ServicerContext) -> pb.SubmitJobsResponse:
        done = await self._jobs.submit_many([(r.spec, r.idempotency_key) for r in request.jobs])
        return pb.SubmitJobsResponse(jobs=[pb.SubmitJobResponse(job=job_to_proto(d.job, with_spec=False),
                                                                duplicate=d.duplicate) for d in done])

    @mapped
    async def GetJob(self, request: pb.GetJobRequest, context: grpc.aio.ServicerContext) -> pb.Job:
        job = await self._jobs.get_job(request.job_id)
        return job_to_proto(job, last_run_state=(await self._jobs.last_run_states([job]))[0])

    @mapped
    async def ListJobs(self, request: pb.ListJobsRequest, context: grpc.aio.ServicerContext) -> pb.ListJobsResponse:
        page = await self._jobs.list_jobs(request.limit, _state_filter(request.state), request.group, request.name,
                                          after=request.page_token, pipelines=request.pipelines)
        states = await self._jobs.last_run_states(page.jobs)
        return pb.ListJobsResponse(jobs=[job_to_proto(j, last_run_state=s) for j, s in zip(page.jobs, states)],
                                   next_page_token=page.next)

    @mapped
    async def Cancel(self, request: pb.CancelRequest, context: grpc.aio.ServicerContext) -> pb.CancelResponse:
        return pb.CancelResponse(cancelled=await self._jobs.cancel(request.id, request.reason))

    @mapped
    async def PauseJob(self, request: pb.JobIdRequest, context: grpc.aio.ServicerContext) -> pb.Job:
        return job_to_proto(await self._jobs.pause(request.job_id))

    @mapped
    async def ResumeJob(self, request: pb.JobIdRequest, context: grpc.aio.ServicerContext) -> pb.Job:
        return job_to_proto(await self._jobs.resume(request.job_id))

    @mapped
    async def TriggerJob(self, request: pb.JobIdRequest, context: grpc.aio.ServicerContext) -> pb.TriggerJobResponse:
        reply = pb.TriggerJobResponse()
        run_to_proto(await self._jobs.trigger(request.job_id), reply.run)
        return reply

    @mapped
    async def Backfill(self, request: pb.BackfillRequest, context: grpc.aio.ServicerContext) -> pb.BackfillResponse:
        return await backfill(self._jobs, self._backfiller, request)

    @mapped
    async def DeleteJob(self, request: pb.DeleteJobRequest, context: grpc.aio.ServicerContext) -> pb.DeleteJobResponse:
        return pb.DeleteJobResponse(cancelled=await self._jobs.delete(request.job_id, request.force))

    @mapped
    async def UpdateJob(self, request: pb.UpdateJobRequest, context: grpc.aio.ServicerContext) -> pb.Job:
        return job_to_proto(await self._jobs.update(request.job_id, request.spec, list(request.fields)))

    @mapped
    async def RerunRun(self, request: pb.RerunRunRequest, context: grpc.aio.ServicerContext) -> pb.Run:
        return run_to_proto(await self._jobs.rerun(request.run_id, request.failed_only))

    @mapped
    async def ListRuns(self, request: pb.ListRunsRequest, context: grpc.aio.ServicerContext) -> pb.ListRunsResponse:
        runs = await self._jobs.list_runs(request.job_id, request.limit, request.with_tasks)
        reply = pb.ListRunsResponse()
        for r in runs:
            run_to_proto(r, reply.runs.add())
        return reply

    @mapped
    async def GetRun(self, request: pb.GetRunRequest, context: grpc.aio.ServicerContext) -> pb.Run:
        return run_to_proto(await self._jobs.get_run(request.run_id))

    @mapped
    async def WaitRun(self, request: pb.WaitRunRequest, context: grpc.aio.ServicerContext) -> pb.WaitRunResponse:
        timeout = request.timeout.seconds + request.timeout.nanos / 1e9
        run, timed_out = await self._run_waits.wait_run(request.run_id, timeout, tasks_while_running=not request.tasks_once_ended)
        if run is None:  # not fired yet: only its identity is known
            return pb.WaitRunResponse(run=pb.Run(id=request.run_id, job_id=request.run_id.split(".", 1)[0]),
                                      timed_out=True)
        reply = pb.WaitRunResponse(timed_out=timed_out)
        run_to_proto(run, reply.run)  # built in the reply: a copy of thousands of tasks otherwise
        return reply

    async def StreamTaskLog(self, request: pb.StreamTaskLogRequest,
                            context: grpc.aio.ServicerContext) -> AsyncIterator[pb.LogChunk]:
        try:
            async for chunk in self._logs.task_log(request.task_id, request.attempt, request.offset, request.follow,
                                                   request.retries):
                yield chunk
        except Exception as exc:
            await _abort(context, exc, "StreamTaskLog")


class WorkerService(pbg.WorkerServiceServicer):
    def __init__(self, connection: WorkerConnection, store: Store) -> None:
        self._connection = connection
        self._store = store

    @mapped
    async def CheckFence(self, request: pb.CheckFenceRequest, context: grpc.aio.ServicerContext) -> pb.CheckFenceResponse:
        if not request.task_id or request.fencing_token <= 0:
            raise InvalidArgument("task_id and a positive fencing_token are required")
        task = await self._store.get_task(request.task_id)
        if task is None:
            return pb.CheckFenceResponse(current=False, reason=f"task {request.task_id} does not exist (deleted?)")
        if task.token != request.fencing_token:
            return pb.CheckFenceResponse(current=False, reason=(
                f"fencing token {request.fencing_token} is stale: task {request.task_id} is at token {task.token}"))
        if task.state != TaskState.LEASED:
            return pb.CheckFenceResponse(current=False, reason=(
                f"task {request.task_id} is {task.state.value}, no longer leased to this attempt"))
        return pb.CheckFenceResponse(current=True)

    async def Connect(self, request_iterator: AsyncIterator[pb.WorkerMessage],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.MasterMessage]:
        try:
            async for message in self._connection.serve(request_iterator, context.peer()):
                yield message
        except Exception as exc:
            await _abort(context, exc, "worker stream")


class ClusterService(pbg.ClusterServiceServicer):
    def __init__(self, store: Store, registry: WorkerRegistry, leadership: Leadership, redis_url: str,
                 started_at: float, timers_pending: Callable[[], int]) -> None:
        self._store = store
        self._registry = registry
        self._leadership = leadership
        self._redis_url = redis_url
        self._started_at = started_at
        self._timers_pending = timers_pending

    @mapped
    async def ListWorkers(self, request: pb.ListWorkersRequest, context: grpc.aio.ServicerContext) -> pb.ListWorkersResponse:
        return pb.ListWorkersResponse(workers=await worker_infos(self._store, self._registry, request.include_dead))

    @mapped
    async def DrainWorker(self, request: pb.DrainWorkerRequest, context: grpc.aio.ServicerContext) -> pb.DrainWorkerResponse:
        if not request.worker_id:
            raise InvalidArgument("worker_id: give the id of a connected worker")
        self._registry.drain(request.worker_id, "asked by a user")
        return pb.DrainWorkerResponse()

    @mapped
    async def GetStatus(self, request: pb.GetStatusRequest, context: grpc.aio.ServicerContext) -> pb.StatusResponse:
        sessions = self._registry.sessions()
        counts = await self._store.counts()
        lead = self._leadership
        out = pb.StatusResponse(
            version=__version__, master_id=lead.master_id, role=lead.role, leader=lead.view.address,
            epoch=lead.view.epoch,
            workers_alive=len(sessions),
            slots_total=sum(s.slots for s in sessions),
            slots_free=sum(s.idle for s in sessions),
            ready_by_group=await self._store.ready_counts(),
            leased=counts["leased"], timers_pending=self._timers_pending(),
            jobs_scheduled=counts["scheduled"], redis=self._redis_url,
        )
        out.started_at.FromMilliseconds(int(self._started_at * 1000))
        for mid, record in await lead.masters():
            info = out.masters.add(id=mid, address=str(record.get("address", "")),
                                   role="leader" if mid == lead.view.leader_id else "standby")
            info.last_seen.FromMilliseconds(int(str(record.get("seen_ms", 0))))
        return out


async def worker_infos(store: Store, registry: WorkerRegistry, include_dead: bool) -> list[pb.WorkerInfo]:
    """Every worker this master knows of: its stored record, and for a connected one its live slots,
    leases and readiness (``sparkyard workers`` and the console's Workers page)."""
    stored = await store.get_workers()
    out = []
    for worker_id, info in sorted(stored.items()):
        session = registry.get(worker_id)
        alive = session is not None
        if not alive and not include_dead:
            continue
        w = pb.WorkerInfo(
            id=worker_id, group=info.get("group", ""), host=info.get("host", ""), pid=int(info.get("pid", 0)),
            slots=int(info.get("slots", 0)), alive=alive, draining=bool(info.get("draining", False)),
            labels=info.get("labels", {}), default_runner=int(info.get("runner", 0)),
        )
        if session is not None:
            w.free_slots = session.free_slots
            w.prefetch = session.prefetch
            w.tasks.extend(sorted(session.leased))
            w.draining = session.draining
            w.readiness = session.readiness
            w.readiness_reason = session.readiness_reason
            w.ready_slots = session.slots if session.ready_slots < 0 else session.ready_slots
        if info.get("registered_ms"):
            w.registered_at.FromMilliseconds(int(info["registered_ms"]))
        if info.get("last_seen_ms"):
            w.last_seen.FromMilliseconds(int(info["last_seen_ms"]))
        out.append(w)
    return out


def master_id(address: str) -> str:
    """A master's id in the leader lease: the same after a restart on the same address (so it takes its own
    lease back at once), different for every master of a cluster. That is its address, except that a
    loopback or wildcard host says nothing about the machine: there the host name stands for it."""
    host, _, port = address.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]", "localhost") or host.startswith("127.") or host == "[::1]":
        host = socket.gethostname()
    return f"{host}:{port}"


class BundleService(pbg.BundleServiceServicer):
    def __init__(self, bundles: BundleStore) -> None:
        self._bundles = bundles

    @mapped
    async def HasBundle(self, request: pb.BundleRef, context: grpc.aio.ServicerContext) -> pb.HasBundleResponse:
        check_ref(request)
        present = await self._bundles.hold(request.digest)
        return pb.HasBundleResponse(present=present, max_bytes=self._bundles.max_bytes)

    @mapped
    async def UploadBundle(self, request_iterator: AsyncIterator[pb.BundleChunk],
                           context: grpc.aio.ServicerContext) -> pb.BundleRef:
        return await self._bundles.upload(request_iterator)

    async def FetchBundle(self, request: pb.BundleRef,
                          context: grpc.aio.ServicerContext) -> AsyncIterator[pb.BundleChunk]:
        try:
            async for chunk in self._bundles.fetch(request):
                yield chunk
        except Exception as exc:
            await _abort(context, exc, "FetchBundle")
