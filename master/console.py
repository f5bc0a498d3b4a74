"""The web console's JSON API (``/api/…``) and its page, served on the master's ``--http`` endpoint.

The API calls the master's own objects (:class:`JobManager`, the worker registry, :class:`LogRelay`) and
answers with the CLI's JSON (:func:`sparkyard.protojson.to_dict` of the same protobuf messages the gRPC
API returns), so ``sparkyard run X --json`` and ``GET /api/runs/X`` agree field for field. Errors are the
domain errors the gRPC API maps (:func:`sparkyard.master.services.status_of`), as HTTP statuses with a
JSON body ``{"error": "…"}`` naming the field or id.

:meth:`ConsoleApi.routes` is the one table of routes, each declaring whether it reads or acts
(:class:`Access`). Reads of what Redis holds work on any master; actions, the live worker list and log
streams need the leader, so a standby forwards them to it (:class:`LeaderLink`) with the caller's token.
The page itself (``console_files/``: plain HTML, CSS and JavaScript, no build step) is public; it holds
no data.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc
from aiohttp import web
from google.protobuf.message import Message

from sparkyard import __version__
from sparkyard.clock import Clock
from sparkyard.protojson import to_dict
from sparkyard.errors import InvalidArgument
from sparkyard.httpserve import MAY_ACT, Access, Handler, Route
from sparkyard.master.backfill import Backfiller
from sparkyard.master.console_params import (backfill_request, flag_param, int_param, json_body, label_param,
                                             matches, state_param)
from sparkyard.master.convert import job_to_proto, run_to_proto
from sparkyard.master.jobs import JobManager
from sparkyard.master.leader import Leadership
from sparkyard.master.leader_link import LeaderLink
from sparkyard.master.logs import LogRelay
from sparkyard.master.records import JobRecord, RunRecord
from sparkyard.master.registry import WorkerRegistry
from sparkyard.master.schedule_text import describe
from sparkyard.options import JobOptions
from sparkyard.master.services import backfill, status_of, worker_infos
from sparkyard.master.store import Store
from sparkyard.ids import IdKind
from sparkyard.states import JobState, RunState
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# The page's files, shipped in the package (pyproject's package-data).
FILES = Path(__file__).resolve().parent / "console_files"
# Jobs page: jobs shown by default, and at most; the runs shown per job (dots and sparkline).
JOBS_DEFAULT = 100
JOBS_MAX = 1000
RECENT_RUNS = 12
# A filtered page (state, group, name, label, search) looks at this many jobs at most, from its cursor on.
JOBS_SCANNED = 1000
# Job page: runs shown by default.
RUNS_DEFAULT = 50
# Timeline: the window, the jobs looked at (newest first) and the runs of each.
TIMELINE_S = 3600
TIMELINE_JOBS = 200
TIMELINE_RUNS = 30
# What the Job page's "edit schedule" may change (JobOptions names).
SCHEDULE_OPTIONS = frozenset({"cron", "tz", "every", "fixed_delay"})
# What a backfill request's body looks like (told to a caller who sent something else).
BACKFILL_EXAMPLE = '{"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z", "max_concurrent": 2}'
# Domain status → HTTP status.
HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
}


def _error(exc: Exception, what: str) -> web.Response:
    status = status_of(exc)
    if status is None:
        log.error("console %s failed", what, exc_info=exc)
        return web.json_response({"error": f"internal error: {type(exc).__name__}: {exc}"}, status=500)
    return web.json_response({"error": status[1]}, status=HTTP_STATUS.get(status[0], 500))


def _mapped(handler: Handler) -> Handler:
    """Domain errors as HTTP statuses with ``{"error": message}``; anything else is a 500 (and logged)."""

    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception as exc:
            return _error(exc, handler.__name__)

    return wrapper


def _authorization(request: web.Request) -> str:
    return request.headers.get("Authorization", "")


class ConsoleApi:
    def __init__(self, jobs: JobManager, store: Store, registry: WorkerRegistry, clock: Clock, logs: LogRelay,
                 leadership: Leadership, link: LeaderLink, backfiller: Backfiller) -> None:
        self._jobs = jobs
        self._backfiller = backfiller
        self._store = store
        self._registry = registry
        self._clock = clock
        self._logs = logs
        self._leadership = leadership
        self._link = link

    def routes(self) -> list[Route]:
        """Every route of the console, and what it lets its caller do."""
        read, act = Access.READ, Access.ACT
        table: list[tuple[str, str, Handler, Access]] = [
            ("GET", "/", self.index, Access.PUBLIC),
            ("GET", "/api/status", self.status, read),
            ("GET", "/api/jobs", self.list_jobs, read),
            ("GET", "/api/jobs/{job_id}", self.job, read),
            ("GET", "/api/jobs/{job_id}/runs", self.runs, read),
            ("POST", "/api/jobs/{job_id}/trigger", self.trigger, act),
            ("POST", "/api/jobs/{job_id}/pause", self.pause, act),
            ("POST", "/api/jobs/{job_id}/resume", self.resume, act),
            ("DELETE", "/api/jobs/{job_id}", self.delete, act),
            ("POST", "/api/jobs/{job_id}/schedule", self.schedule, act),
            ("POST", "/api/jobs/{job_id}/backfill", self.backfill, act),
            ("GET", "/api/runs/{run_id}", self.run, read),
            ("POST", "/api/runs/{run_id}/rerun", self.rerun, act),
            ("POST", "/api/runs/{run_id}/cancel", self.cancel, act),
            ("GET", "/api/tasks/{task_id}/log", self.task_log, read),
            ("GET", "/api/workers", self.workers, read),
            ("POST", "/api/workers/{worker_id}/drain", self.drain, act),
            ("GET", "/api/timeline", self.timeline, read),
        ]
        return [Route(method, path, _mapped(handler), access) for method, path, handler, access in table]

    # ---- the page and the master ----------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(FILES / "index.html")

    async def status(self, request: web.Request) -> web.Response:
        lead = self._leadership
        return web.json_response({"version": __version__, "master_id": lead.master_id, "role": lead.role,
                                  "leader": lead.view.address, "epoch": lead.view.epoch,
                                  "may_act": request.get(MAY_ACT, True)})

    # ---- reads from Redis (any master) ----------------------------------------------------------------

    async def _job_view(self, job: JobRecord, recent: list[RunRecord]) -> dict[str, Any]:
        return {"job": to_dict(job_to_proto(job)), "schedule": describe(job.spec.trigger, await self._parent_name(job)),
                "runs": [to_dict(run_to_proto(r)) for r in recent], "shown_state": await self._shown_state(job, recent)}

    async def _parent_name(self, job: JobRecord) -> str:
        """A child job's parent's name ('' when it has none, or for other jobs)."""
        if job.spec.trigger.WhichOneof("kind") != "after":
            return ""
        parent = await self._store.get_job(job.spec.trigger.after.job_id)
        return parent.spec.name if parent else ""

    async def _shown_state(self, job: JobRecord, recent: list[RunRecord]) -> str:
        """The job's state as a person reads it: a COMPLETED job (it fires no more) whose last run FAILED
        shows FAILED; a one-shot job whose only run failed did not complete anything."""
        if job.state is not JobState.COMPLETED or not job.last_run_id:
            return job.state.value
        last = next((r for r in recent if r.id == job.last_run_id), None)
        if last is None:
            last = await self._store.get_run(job.last_run_id, with_tasks=False)
        return "FAILED" if last is not None and last.state is RunState.FAILED else job.state.value

    async def list_jobs(self, request: web.Request) -> web.Response:
        """``state``, ``pipelines`` (1: pipelines only, from their index), ``group``, ``name`` (part of it),
        ``label`` (K or K=V), ``q`` (part of the id, name, entrypoint or an argument), ``limit``, ``after``
        (the ``next`` of the previous page); each job with its schedule in words and its latest runs. A
        filtered page looks at JOBS_SCANNED jobs at most."""
        limit = int_param(request, "limit", JOBS_DEFAULT, 1, JOBS_MAX)
        state, label, group = state_param(request), label_param(request), request.query.get("group", "")
        name, text, pipelines = request.query.get("name", ""), request.query.get("q", ""), flag_param(request, "pipelines")
        filtered = bool(name or text or label or state or group)
        page = await self._jobs.list_jobs(limit, state, group, after=request.query.get("after", ""),
                                          budget=JOBS_SCANNED if filtered else limit, pipelines=pipelines,
                                          keep=lambda j: matches(j, name, text, label))
        recent = await self._store.recent_runs([j.id for j in page.jobs], RECENT_RUNS)
        views = await asyncio.gather(*(self._job_view(j, runs) for j, runs in zip(page.jobs, recent)))
        return web.json_response({"jobs": views, "scanned": page.scanned if filtered else None, "next": page.next})

    async def job(self, request: web.Request) -> web.Response:
        return web.json_response(await self._job_view(await self._jobs.get_job(request.match_info["job_id"]), []))

    async def runs(self, request: web.Request) -> web.Response:
        limit = int_param(request, "limit", RUNS_DEFAULT, 1, JOBS_MAX)
        runs = await self._jobs.list_runs(request.match_info["job_id"], limit, with_tasks=False)
        return web.json_response([to_dict(run_to_proto(r)) for r in runs])

    async def run(self, request: web.Request) -> web.Response:
        return web.json_response(to_dict(run_to_proto(await self._jobs.get_run(request.match_info["run_id"]))))

    async def timeline(self, request: web.Request) -> web.Response:
        """The runs that had a task on a worker in the last hour, with their tasks and attempts (the page
        draws one bar per attempt), and the names of their jobs. A pipeline's tasks run in its step jobs,
        which are not listed: those of its current version are looked at too, named ``pipeline.step``."""
        until_ms = int(self._clock.now() * 1000)
        since_ms = until_ms - TIMELINE_S * 1000
        jobs = (await self._jobs.list_jobs(TIMELINE_JOBS, None, "")).jobs
        names = {j.id: j.spec.name for j in jobs}
        names.update({s.job_id: f"{j.spec.name}.{s.name}" for j in jobs for s in j.spec.steps})
        per_job = await asyncio.gather(*(self._store.list_runs(job_id, TIMELINE_RUNS, with_tasks=True)
                                         for job_id in names))
        runs = [r for runs in per_job for r in runs
                if r.started_ms and (not r.finished_ms or r.finished_ms >= since_ms)]
        return web.json_response({"since_ms": since_ms, "until_ms": until_ms, "names": names,
                                  "runs": [to_dict(run_to_proto(r)) for r in runs]})

    # ---- what needs the leader (a standby forwards it) ------------------------------------------------

    async def _act(self, request: web.Request, local: Callable[[], Awaitable[Message]], service: str,
                   method: str, message: Message, field: str = "") -> web.Response:
        """Do it here when leading, else have the leader do it; answer the resulting message as JSON
        (``field``: the part of the leader's reply that ``local`` returns)."""
        if self._leadership.leading:
            reply = await local()
        else:
            reply = await self._link.call(service, method, message, _authorization(request))
            if field:
                reply = getattr(reply, field)
        return web.json_response(to_dict(reply))

    async def trigger(self, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]

        async def local() -> Message:
            return run_to_proto(await self._jobs.trigger(job_id))

        return await self._act(request, local, "jobs", "TriggerJob", pb.JobIdRequest(job_id=job_id), "run")

    async def pause(self, request: web.Request) -> web.Response:
        return await self._set_state(request, self._jobs.pause, "PauseJob")

    async def resume(self, request: web.Request) -> web.Response:
        return await self._set_state(request, self._jobs.resume, "ResumeJob")

    async def _set_state(self, request: web.Request, change: Callable[[str], Awaitable[JobRecord]],
                         method: str) -> web.Response:
        job_id = request.match_info["job_id"]

        async def local() -> Message:
            return job_to_proto(await change(job_id))

        return await self._act(request, local, "jobs", method, pb.JobIdRequest(job_id=job_id))

    async def delete(self, request: web.Request) -> web.Response:
        """``force=1`` cancels the job's active runs first (else a job with one is refused, 409)."""
        job_id, force = request.match_info["job_id"], flag_param(request, "force")

        async def local() -> Message:
            return pb.DeleteJobResponse(cancelled=await self._jobs.delete(job_id, force))

        return await self._act(request, local, "jobs", "DeleteJob", pb.DeleteJobRequest(job_id=job_id, force=force))

    async def schedule(self, request: web.Request) -> web.Response:
        """A new schedule from the next firing on (UpdateJob): a JSON body with ``cron`` (and ``tz``) or
        ``every`` (and ``fixed_delay``), read and checked by the same :class:`JobOptions` as
        ``sparkyard update --cron …``."""
        job_id = request.match_info["job_id"]
        body = await json_body(request, '{"cron": "0 3 * * *", "tz": "UTC"}')
        if not body or set(body) - SCHEDULE_OPTIONS:
            raise InvalidArgument(f"body: give some of {', '.join(sorted(SCHEDULE_OPTIONS))} as a JSON object")
        given = [name for name, value in body.items() if value not in (None, "")]
        change, fields, _ = JobOptions.of({name: body[name] for name in given}).to_update(given)

        async def local() -> Message:
            return job_to_proto(await self._jobs.update(job_id, change, fields))

        return await self._act(request, local, "jobs", "UpdateJob",
                               pb.UpdateJobRequest(job_id=job_id, spec=change, fields=fields))

    async def rerun(self, request: web.Request) -> web.Response:
        """A new run of the ended run's job: ``failed=1`` only its failed and cancelled tasks (RerunRun)."""
        run_id, failed_only = request.match_info["run_id"], flag_param(request, "failed")

        async def local() -> Message:
            return run_to_proto(await self._jobs.rerun(run_id, failed_only))

        return await self._act(request, local, "jobs", "RerunRun",
                               pb.RerunRunRequest(run_id=run_id, failed_only=failed_only))

    async def cancel(self, request: web.Request) -> web.Response:
        """Cancel an active run (as ``sparkyard cancel RUN``): its running tasks are stopped; a pipeline run's
        running steps too, and its steps not started never start. Answers the ids whose state changed."""
        run_id = request.match_info["run_id"]
        JobManager.check_id(run_id, IdKind.RUN)  # the same Cancel takes a job or a task id: not here
        reason = "cancelled from the console"

        async def local() -> Message:
            return pb.CancelResponse(cancelled=await self._jobs.cancel(run_id, reason))

        return await self._act(request, local, "jobs", "Cancel", pb.CancelRequest(id=run_id, reason=reason))

    async def backfill(self, request: web.Request) -> web.Response:
        """Runs for a recurring job's past fire times (Backfill, as ``sparkyard backfill``): a JSON body with
        ``start`` and ``end`` (ISO 8601 with an offset) and ``max_concurrent`` (default 1)."""
        job_id = request.match_info["job_id"]
        message = backfill_request(job_id, await json_body(request, BACKFILL_EXAMPLE))

        async def local() -> Message:
            return await backfill(self._jobs, self._backfiller, message)

        return await self._act(request, local, "jobs", "Backfill", message)

    async def drain(self, request: web.Request) -> web.Response:
        worker_id = request.match_info["worker_id"]

        async def local() -> Message:
            self._registry.drain(worker_id, "asked from the console")
            return pb.DrainWorkerResponse()

        await self._act(request, local, "cluster", "DrainWorker", pb.DrainWorkerRequest(worker_id=worker_id))
        return web.json_response({"draining": worker_id})

    async def workers(self, request: web.Request) -> web.Response:
        everyone = flag_param(request, "all")
        if self._leadership.leading:
            workers = await worker_infos(self._store, self._registry, everyone)
        else:
            reply = await self._link.call("cluster", "ListWorkers", pb.ListWorkersRequest(include_dead=everyone),
                                          _authorization(request))
            workers = list(reply.workers)
        return web.json_response([to_dict(w) for w in workers])

    async def task_log(self, request: web.Request) -> web.StreamResponse:
        """An attempt's log as plain text, streamed; ``follow=1`` keeps the response open until the attempt
        ends (as ``sparkyard logs -f``). ``attempt`` (0: latest) and ``offset`` as in StreamTaskLog."""
        task_id = request.match_info["task_id"]
        attempt = int_param(request, "attempt", 0)
        offset = int_param(request, "offset", 0)
        follow = flag_param(request, "follow")
        chunks: AsyncIterator[pb.LogChunk]
        if self._leadership.leading:
            chunks = self._logs.attempt_log(await self._jobs.get_task(task_id), attempt, offset, follow)
        else:
            forwarded = pb.StreamTaskLogRequest(task_id=task_id, attempt=attempt, offset=offset, follow=follow)
            chunks = self._link.log(forwarded, _authorization(request))
        return await _stream_log(request, chunks)


async def _stream_log(request: web.Request, chunks: AsyncIterator[pb.LogChunk]) -> web.StreamResponse:
    """Send the chunks as they come. The first is awaited before the response starts, so an unknown task
    or an unreachable worker is still a JSON error with its status; a failure later ends the text with a
    line saying why. A caller that goes away ends the stream (and the pull from the worker)."""
    iterator = chunks.__aiter__()
    try:
        first: pb.LogChunk | None = await iterator.__anext__()
    except StopAsyncIteration:
        first = None
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store"})
    await response.prepare(request)
    try:
        if first is not None:
            await response.write(first.data)
            async for chunk in iterator:
                await response.write(chunk.data)
    except ConnectionResetError:  # the page went away
        return response
    except Exception as exc:
        status = status_of(exc)
        await response.write(f"\n[sparkyard: the log stopped: {status[1] if status else exc}]\n".encode())
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
    await response.write_eof()
    return response
