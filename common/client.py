"""The Python client: ``from sparkyard import Client``.

    with Client("127.0.0.1:7070") as client:
        job = client.submit("jobs/etl.py:main", args=["2026-11-22"], retries=2, timeout="30m")
        run, timed_out = client.wait(client.first_run_id(job), timeout=600)

Calls are synchronous. Transport failures (UNAVAILABLE) are retried by gRPC itself with backoff — safe
for submits because every submit carries an idempotency key (one is generated when none is given).
``master`` may list several masters (``"h1:7070,h2:7070"``): calls go to the leader, following a
standby's answer that names it, waiting out an election, or trying the next master of the list.
gRPC errors are raised as :mod:`sparkyard.errors` classes carrying the server's message.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import grpc

from sparkyard import errors, resources
from sparkyard.channel import credentials, tls_hint, translate
from sparkyard.addresses import master_addresses
from sparkyard.client_settings import load_client
from sparkyard.config_source import ConfigError
from sparkyard.leader_calls import ELECTION_POLL_S, LEADER_WAIT_S, LeaderCalls
from sparkyard.job_names import resolve_after, resolve_job, resolve_target
from sparkyard.option_values import duration_s
from sparkyard.timeutil import format_size, parse_instant
from sparkyard.v1 import sparkyard_pb2 as pb

if TYPE_CHECKING:
    from sparkyard.bundle import Bundle
    from sparkyard.options import JobOptions, build_spec, build_specs

log = logging.getLogger(__name__)

__all__ = ["Client", "JobOptions", "build_spec", "build_specs", "first_run_id", "translate"]

# WaitRun calls are chained in steps of at most this long (the server caps one call too).
WAIT_STEP_S = 300.0
# With a progress callback, the run is looked at this often (each look returns the run with its tasks).
PROGRESS_STEP_S = 1.0
# How long ``wait`` keeps trying while no master answers at all (a master restarting): a run goes on without one.
WAIT_UNREACHABLE_S = 300.0
# Jobs listed when no limit is given: the master's default (master/jobs.py DEFAULT_LIST_LIMIT).
LISTED_BY_DEFAULT = 50


def __getattr__(name: str) -> Any:
    """``JobOptions``, ``build_spec`` and ``build_specs``, named here for ``from sparkyard.client import
    build_spec``, are imported when first asked for: a client that submits nothing (``sparkyard jobs``,
    ``status``) does not wait for the job options' parsers, bundles and cron (docs/benchmarks.md, CLI
    start-up)."""
    if name in ("JobOptions", "build_spec", "build_specs"):
        from sparkyard import options

        return getattr(options, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def first_run_id(job: pb.Job) -> str:
    """The id the job's next firing will have (a run id is job id + scheduled time)."""
    if not job.HasField("next_fire_at"):
        if job.last_run_id:
            return job.last_run_id
        raise errors.FailedPrecondition(f"job {job.id} has no next firing")
    return f"{job.id}.{job.next_fire_at.ToMilliseconds():013d}"


class Client:
    def __init__(self, master: str | None = None, *, token: str | None = None, timeout: float | None = None,
                 config_file: str | None = None, token_file: str | None = None, tls_ca: str | None = None,
                 tls_cert: str | None = None, tls_key: str | None = None) -> None:
        """Settings left None come from the config file and ``SPARKYARD_*`` variables (``tls_ca``,
        ``tls_cert`` and ``tls_key`` all ``""`` ask for a plaintext channel whatever they say)."""
        cfg = self.config = load_client(config_file=config_file, overrides={
            "master": master, "token": token, "call_timeout_s": timeout, "token_file": token_file,
            "tls_ca": tls_ca, "tls_cert": tls_cert, "tls_key": tls_key})
        credentials(cfg)  # unreadable TLS files fail here, naming the setting
        try:
            self.masters = master_addresses(cfg.master)
        except ConfigError as exc:
            raise errors.InvalidArgument(str(exc)) from None
        self._link = LeaderCalls(cfg, self.masters)

    @property
    def master(self) -> str:
        """The master calls go to now (moves to the leader a standby names)."""
        return self._link.master

    def close(self) -> None:
        self._link.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- jobs --------------------------------------------------------------------------------------------

    def submit(self, entrypoint: str, *, idempotency_key: str | None = None, **options: Any) -> pb.Job:
        """Submit a job (the options are the fields of :class:`JobOptions`), uploading its files first when
        the master does not have them yet; returns the stored job."""
        from sparkyard.options import build_spec

        job = self.submit_spec(build_spec(entrypoint, **options), idempotency_key).job
        _warn_unhonoured(job)
        return job

    def _upload_for(self, specs: Sequence[pb.JobSpec]) -> None:
        """Upload the bundles these specs (and a pipeline's steps) name that this process built, each digest
        once: a pipeline ships its steps' code the way a job ships its own."""
        from sparkyard.bundle import built  # a bundle built here (sparkyard.options) has imported it already

        named = [b for s in specs for b in (s.bundle, *(step.spec.bundle for step in s.steps))]
        for digest in dict.fromkeys(b.digest for b in named if b.digest):
            packed = built(digest)
            if packed is not None:
                self.upload(packed)

    def upload(self, packed: Bundle) -> None:
        """Store a bundle on the master unless it is there already (content-addressed: sent once)."""
        ref = pb.BundleRef(digest=packed.digest, size=len(packed.data))
        have = self._link.call("bundles", "HasBundle", ref)
        if have.present:
            return
        if have.max_bytes and ref.size > have.max_bytes:
            raise errors.ResourceExhausted(
                f"bundle is {format_size(ref.size)}, over the master's limit of {format_size(have.max_bytes)} "
                "(--max-bundle); ship less (.sparkyardignore) or raise the limit")
        from sparkyard.bundle import chunks

        parts = chunks(packed.data)
        messages = [pb.BundleChunk(ref=ref, data=parts[0]), *(pb.BundleChunk(data=p) for p in parts[1:])]
        self._link.call("bundles", "UploadBundle", messages, timeout=max(self._link.timeout, ref.size / 1e6))

    def submit_spec(self, spec: pb.JobSpec, idempotency_key: str | None = None, *,
                    read_mask: Sequence[str] = ()) -> pb.SubmitJobResponse:
        """Submit a spec as it is; ``read_mask`` names the fields of the job the reply is to carry (e.g. ``id``,
        ``spec.name``; none: all of it, the split's input list included)."""
        resolve_after(spec, self._named)
        self._upload_for([spec])
        request = pb.SubmitJobRequest(spec=spec, idempotency_key=idempotency_key or uuid.uuid4().hex)
        if read_mask:
            request.read_mask.paths.extend(read_mask)
        return self._link.call("jobs", "SubmitJob", request)

    def submit_many(self, specs: Sequence[pb.JobSpec], idempotency_keys: Sequence[str] | None = None) -> list[pb.Job]:
        """Submit many jobs in one call (all validated first; one bad spec rejects the call).

        ``idempotency_keys``, one per spec, make the call safe to repeat: a job whose key the master has seen
        (within its idempotency TTL) is returned as it is, not made again, so a bulk submit that failed
        part-way (the master stored the jobs chunk by chunk) is finished by sending it again. Without them each
        call draws fresh keys, and repeating it makes the jobs again."""
        if idempotency_keys is not None and len(idempotency_keys) != len(specs):
            raise errors.InvalidArgument(f"idempotency_keys: {len(idempotency_keys)} keys for {len(specs)} jobs "
                                         "(one per job)")
        keys = list(idempotency_keys) if idempotency_keys is not None else [uuid.uuid4().hex for _ in specs]
        for spec in specs:
            resolve_after(spec, self._named)
        self._upload_for(specs)
        request = pb.SubmitJobsRequest(jobs=[pb.SubmitJobRequest(spec=s, idempotency_key=k)
                                             for s, k in zip(specs, keys)])
        return [r.job for r in self._link.call("jobs", "SubmitJobs", request).jobs]

    def update(self, job_id: str, entrypoint: str = "", **options: Any) -> pb.Job:
        """Change a job from its next firing on: only the options given (the fields of
        :class:`JobOptions`, as for :meth:`submit`) change; ``entrypoint`` ships its code anew (with
        ``py_files``, ``files``, ``bundle`` as given). Runs made before keep what they were made with."""
        from sparkyard.options import JobOptions

        given = [name for name, value in options.items() if value is not None]
        change, fields, _ = JobOptions.of(options).to_update(given, entrypoint)
        job = self.update_spec(job_id, change, fields)
        _warn_unhonoured(job)
        return job

    def update_spec(self, job_id: str, change: pb.JobSpec, fields: Sequence[str]) -> pb.Job:
        """UpdateJob with a spec holding the change and the JobSpec fields to take from it."""
        resolve_after(change, self._named)
        self._upload_for([change])
        request = pb.UpdateJobRequest(job_id=self._job_id(job_id), spec=change, fields=fields)
        return self._link.call("jobs", "UpdateJob", request)

    # Every method that takes a job id takes a job's name too (sparkyard.job_names).
    def _named(self, name: str, limit: int) -> list[pb.Job]:
        return self.jobs(limit=limit, name=name)

    def _job_id(self, ref: str) -> str:
        return resolve_job(ref, self._named)

    def job(self, job_id: str) -> pb.Job:
        return self._link.call("jobs", "GetJob", pb.GetJobRequest(job_id=self._job_id(job_id)))

    def jobs(self, *, limit: int = 0, state: str = "", group: str = "", name: str = "",
             pipelines: bool = False) -> list[pb.Job]:
        """Newest first; ``state`` active, paused, completed, cancelled, or failed: of the newest ``limit``
        completed jobs (they fire no more), those whose last run FAILED — as the console shows them.
        ``pipelines``: only pipelines (read from their own index, whatever the number of other jobs)."""
        if state == "failed":
            done = self.jobs(limit=limit, state="completed", group=group, name=name, pipelines=pipelines)
            return [j for j in done if j.last_run_state == pb.RUN_FAILED]
        enum = pb.JobState.Value(f"JOB_{state.upper()}") if state else pb.JOB_STATE_UNSPECIFIED
        wanted, token = limit or LISTED_BY_DEFAULT, ""
        out: list[pb.Job] = []
        while True:  # a filter that matches few jobs is answered page by page (ListJobsRequest.page_token)
            request = pb.ListJobsRequest(limit=wanted - len(out), state=enum, group=group, name=name, page_token=token,
                                         pipelines=pipelines)
            reply = self._link.call("jobs", "ListJobs", request)
            out += reply.jobs
            token = reply.next_page_token
            if not token or len(out) >= wanted:
                return out

    def cancel(self, target_id: str, reason: str = "") -> list[str]:
        request = pb.CancelRequest(id=resolve_target(target_id, self._named), reason=reason)
        return list(self._link.call("jobs", "Cancel", request).cancelled)

    def pause(self, job_id: str) -> pb.Job:
        return self._link.call("jobs", "PauseJob", pb.JobIdRequest(job_id=self._job_id(job_id)))

    def resume(self, job_id: str) -> pb.Job:
        return self._link.call("jobs", "ResumeJob", pb.JobIdRequest(job_id=self._job_id(job_id)))

    def delete(self, job_id: str, force: bool = False) -> list[str]:
        """Delete a job (its history follows in the background). A job with an active run raises
        FailedPrecondition naming it, unless ``force``: its active runs are cancelled first, and the ids
        that cancel changed are returned. A job that is gone raises NotFound."""
        request = pb.DeleteJobRequest(job_id=self._job_id(job_id), force=force)
        return list(self._link.call("jobs", "DeleteJob", request).cancelled)

    def trigger(self, job_id: str) -> pb.Run:
        return self._link.call("jobs", "TriggerJob", pb.JobIdRequest(job_id=self._job_id(job_id))).run

    def backfill(self, job_id: str, start: str | datetime, end: str | datetime, *,
                 max_concurrent: int = 1) -> pb.BackfillResponse:
        """Runs for the job's fire times from ``start`` to ``end`` (both included; ISO 8601 with an offset,
        or aware datetimes), at most ``max_concurrent`` of the job's runs active at once. The master keeps
        the plan and fires it; a time whose run exists already is not run again."""
        request = pb.BackfillRequest(job_id=self._job_id(job_id), max_concurrent=max_concurrent)
        for name, moment in (("start", start), ("end", end)):
            if isinstance(moment, datetime):
                if moment.tzinfo is None:
                    raise errors.InvalidArgument(f"{name}: {moment} has no time zone")
                seconds = moment.timestamp()
            else:
                try:
                    seconds = parse_instant(moment, field=name)
                except ValueError as exc:
                    raise errors.InvalidArgument(str(exc)) from None
            getattr(request, name).FromMilliseconds(round(seconds * 1000))
        return self._link.call("jobs", "Backfill", request)

    # ---- runs --------------------------------------------------------------------------------------------

    def rerun(self, run_id: str, *, failed_only: bool = False) -> pb.Run:
        """Run an ended run again as a new run (the original stays as it was): all its tasks, or only its
        failed and cancelled ones; with the job's current spec and the original's scheduled time."""
        return self._link.call("jobs", "RerunRun", pb.RerunRunRequest(run_id=run_id, failed_only=failed_only))

    def runs(self, job_id: str, *, limit: int = 0, with_tasks: bool = False) -> list[pb.Run]:
        request = pb.ListRunsRequest(job_id=self._job_id(job_id), limit=limit, with_tasks=with_tasks)
        return list(self._link.call("jobs", "ListRuns", request).runs)

    def run(self, run_id: str) -> pb.Run:
        return self._link.call("jobs", "GetRun", pb.GetRunRequest(run_id=run_id))

    def wait(self, run_id: str, timeout: float | str | None = None,
             on_progress: Callable[[pb.Run], None] | None = None) -> tuple[pb.Run, bool]:
        """Block until the run ends or ``timeout`` passes (None: no limit); returns (run, timed_out).

        ``on_progress`` is called with the run as it stands about every :data:`PROGRESS_STEP_S` while it is
        still going (a progress bar: its counts, without its tasks); without it the wait is one long call per
        :data:`WAIT_STEP_S`. Only the run returned carries its tasks: the calls before ask the master to leave
        them out (WaitRunRequest.tasks_once_ended), so a long wait on thousands of tasks does not fetch them
        again each step."""
        total = duration_s(timeout, "timeout")
        longest = WAIT_STEP_S if on_progress is None else PROGRESS_STEP_S
        waited = 0.0
        unreachable_since: float | None = None
        while True:
            step = longest if total is None else max(0.001, min(longest, total - waited))
            last = total is not None and waited + step >= total  # its reply is returned, ended or not
            request = pb.WaitRunRequest(run_id=run_id, tasks_once_ended=not last)
            request.timeout.FromMilliseconds(int(step * 1000))
            started = time.monotonic()
            try:
                reply = self._link.call("jobs", "WaitRun", request, timeout=step + self._link.timeout)
            except errors.Unavailable:
                # A master restarting (or failing over) does not end the run: keep waiting for it, for as long
                # as the wait may last, up to WAIT_UNREACHABLE_S of no master at all.
                now = time.monotonic()
                unreachable_since = unreachable_since or now
                waited += now - started
                if now - unreachable_since > WAIT_UNREACHABLE_S or (total is not None and waited >= total):
                    raise
                time.sleep(ELECTION_POLL_S)
                waited += ELECTION_POLL_S
                self._link.master = self.masters[0]
                continue
            unreachable_since = None
            waited += step
            if not reply.timed_out or (total is not None and waited >= total):
                return reply.run, reply.timed_out
            if on_progress is not None:
                on_progress(reply.run)

    first_run_id = staticmethod(first_run_id)

    def logs(self, task_id: str, *, attempt: int = 0, follow: bool = False, offset: int = 0,
             retries: bool = False) -> Iterator[bytes]:
        """The log of a task's attempt (latest by default), chunk by chunk; ``follow`` streams until it ends,
        and with ``retries`` goes on with the task's next attempts (each log begins with its attempt's header
        line) until the task has ended. Goes to the leader like every call; a stream broken by a change of
        master resumes where it was, and a followed one rides through a restart of its only master as
        :meth:`wait` does (up to WAIT_UNREACHABLE_S with no master at all)."""
        deadline = time.monotonic() + LEADER_WAIT_S
        unreachable: set[str] = set()
        unreachable_since: float | None = None
        while True:
            request = pb.StreamTaskLogRequest(task_id=task_id, attempt=attempt, follow=follow, offset=offset,
                                              retries=retries)
            try:
                for chunk in self._link.stubs("jobs").StreamTaskLog(request, metadata=self._link.metadata,
                                                      timeout=None if follow else self._link.timeout * 4):
                    unreachable_since = None
                    # A resumed stream asks for the attempt it was in (not the latest), from where it was.
                    attempt, offset = chunk.attempt or attempt, chunk.offset + len(chunk.data)
                    if chunk.data:
                        yield chunk.data
                return
            except grpc.RpcError as exc:
                if self._link.follow(exc, unreachable, deadline, "StreamTaskLog"):
                    continue
                failure = translate(exc, self.master, tls_hint(self.config))
                now = time.monotonic()
                unreachable_since = unreachable_since or now
                riding = follow and isinstance(failure, errors.Unavailable)
                if not riding or now - unreachable_since > WAIT_UNREACHABLE_S:
                    raise failure from None
                time.sleep(ELECTION_POLL_S)
                self._link.master, deadline = self.masters[0], time.monotonic() + LEADER_WAIT_S
                unreachable.clear()

    # ---- cluster -----------------------------------------------------------------------------------------

    def workers(self, *, include_dead: bool = False) -> list[pb.WorkerInfo]:
        return list(self._link.call("cluster", "ListWorkers", pb.ListWorkersRequest(include_dead=include_dead)).workers)

    def drain(self, worker_id: str) -> None:
        """Ask a connected worker to drain and exit, as SIGTERM does (it finishes or hands back its tasks)."""
        self._link.call("cluster", "DrainWorker", pb.DrainWorkerRequest(worker_id=worker_id))

    def status(self) -> pb.StatusResponse:
        return self._link.call("cluster", "GetStatus", pb.GetStatusRequest())


def _warn_unhonoured(job: pb.Job) -> None:
    """Resources the job's runner will not apply are said, not dropped (sparkyard.resources)."""
    notice = resources.submit_notice(job.spec)
    if notice:
        log.warning("job %s: %s", job.id, notice)
