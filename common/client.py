"""The Python client: ``from sparkyard import Client``.

    with Client("127.0.0.1:7070") as client:
        job = client.submit("jobs/etl.py:main", args=["2026-11-22"], retries=2, timeout="30m")
        run, timed_out = client.wait(client.first_run_id(job), timeout=600)

Calls are synchronous. Transport failures (UNAVAILABLE) are retried by gRPC itself with backoff — safe
for submits because every submit carries an idempotency key (one is generated when none is given).
gRPC errors are raised as :mod:`sparkyard.errors` classes carrying the server's message.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import grpc

from sparkyard import errors
from sparkyard.config import ClientConfig, load
from sparkyard.bundle import Bundle, built, chunks
from sparkyard.bundle import build as build_bundle
from sparkyard.spec import parse_conf, parse_entrypoint, resolve_entrypoint
from sparkyard.timeutil import format_size, parse_duration, parse_instant, parse_size
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

# gRPC's own retry of UNAVAILABLE (master restarting): attempts and backoff.
_SERVICE_CONFIG = json.dumps({
    "methodConfig": [{
        "name": [{"service": "sparkyard.v1.JobService"}, {"service": "sparkyard.v1.ClusterService"}],
        "retryPolicy": {
            "maxAttempts": 5,
            "initialBackoff": "0.2s",
            "maxBackoff": "3s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        },
    }]
})
# WaitRun calls are chained in steps of at most this long (the server caps one call too).
WAIT_STEP_S = 300.0

_RUNNERS = {"": pb.RUNNER_UNSPECIFIED, "submit": pb.RUNNER_SUBMIT, "session": pb.RUNNER_SESSION}
_MISFIRE = {"": pb.MISFIRE_UNSPECIFIED, "skip": pb.MISFIRE_SKIP, "fire-once": pb.MISFIRE_FIRE_ONCE,
            "catch-up": pb.MISFIRE_CATCH_UP}
_OVERLAP = {"": pb.OVERLAP_UNSPECIFIED, "allow": pb.OVERLAP_ALLOW, "forbid": pb.OVERLAP_FORBID,
            "replace": pb.OVERLAP_REPLACE}
_ROUTING = {"": pb.ROUTING_UNSPECIFIED, "least-loaded": pb.ROUTING_LEAST_LOADED, "round-robin": pb.ROUTING_ROUND_ROBIN,
            "random": pb.ROUTING_RANDOM, "consistent-hash": pb.ROUTING_CONSISTENT_HASH,
            "previous-worker": pb.ROUTING_PREVIOUS_WORKER}


def _choice(table: dict[str, int], value: str | None, field: str) -> int:
    key = (value or "").lower()
    if key not in table:
        raise errors.InvalidArgument(f"{field}: {value!r} is not one of {', '.join(k for k in table if k)}")
    return table[key]


def _duration(value: float | str | None, field: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        if value < 0:
            raise errors.InvalidArgument(f"{field}: must not be negative")
        return float(value)
    try:
        return parse_duration(value, field=field)
    except ValueError as exc:
        raise errors.InvalidArgument(str(exc)) from None


def _instant(value: float | str | None, field: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return parse_instant(value, field=field)
    except ValueError as exc:
        raise errors.InvalidArgument(str(exc)) from None


def translate(exc: grpc.RpcError, master: str) -> errors.SparkyardError:
    """A gRPC error as the matching Sparkyard error."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.UNAVAILABLE:
        return errors.Unavailable(f"no master reachable at {master}: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return errors.Unavailable(f"master {master} did not answer in time: {details}")
    cls = errors.BY_CODE_NAME.get(code.name, errors.SparkyardError)
    return cls(details or code.name)


def build_spec(entrypoint: str, **options: Any) -> pb.JobSpec:
    """A JobSpec from friendly arguments (see :func:`prepare`); raises InvalidArgument naming the bad one."""
    return prepare(entrypoint, **options)[0]


def _paths(items: Sequence[str], base: Path) -> tuple[Path, ...]:
    """Comma-separated or repeated paths (spark-submit's --py-files/--files style), made absolute."""
    out = []
    for item in items:
        for part in str(item).split(","):
            if part.strip():
                path = Path(part.strip()).expanduser()
                out.append(path if path.is_absolute() else (base / path).absolute())
    return tuple(out)


def prepare(entrypoint: str, *, base_dir: Path | None = None, args: Sequence[str] = (), name: str = "",
               group: str = "", priority: int = 0, runner: str = "", conf: Mapping[str, str] | Sequence[str] | None = None,
               env: Mapping[str, str] | Sequence[str] | None = None, py_files: Sequence[str] = (), retries: int = 0,
               backoff: float | str | None = None, max_backoff: float | str | None = None,
               timeout: float | str | None = None, delay: float | str | None = None, at: float | str | None = None,
               cron: str = "", tz: str = "", every: float | str | None = None, fixed_delay: bool = False,
               start_at: float | str | None = None, end_at: float | str | None = None, max_runs: int = 0,
               misfire: str = "", catch_up_limit: int = 0, overlap: str = "",
               inputs: Sequence[str | tuple[str, str]] = (), parallelism: int = 0, max_bytes_per_sec: int = 0,
               max_records_per_sec: int = 0, task_bytes_per_sec: int = 0, task_records_per_sec: int = 0,
               max_concurrent: int = 0, routing: str = "", routing_key: str = "",
               labels: dict[str, str] | None = None, files: Sequence[str] = (), bundle: str | None = None,
               cwd: str | None = None, task_memory: str | int | None = None,
               ship: bool = True) -> tuple[pb.JobSpec, Bundle | None]:
    """A JobSpec from friendly arguments, and the bundle of files to upload with it (None: nothing is
    shipped). A file entrypoint, ``py_files``, ``files`` and ``bundle`` (a directory) are shipped unless
    ``ship`` is False; see :mod:`sparkyard.bundle` for the layout. Raises InvalidArgument naming the bad
    argument."""
    base = (base_dir or Path.cwd()).absolute()
    try:
        entry = resolve_entrypoint(entrypoint, base)
        conf_map = dict(conf) if isinstance(conf, Mapping) else parse_conf(list(conf or []))
        env_map = dict(env) if isinstance(env, Mapping) else parse_conf(list(env or []), field="env")
    except ValueError as exc:
        raise errors.InvalidArgument(str(exc)) from None
    if retries < 0:
        raise errors.InvalidArgument("retries: must not be negative")
    triggers = [k for k, v in (("delay", delay), ("at", at), ("cron", cron), ("every", every)) if v not in (None, "")]
    if len(triggers) > 1:
        raise errors.InvalidArgument(f"trigger: choose one of --delay, --at, --cron, --every (got {', '.join(triggers)})")
    spec = pb.JobSpec(
        name=name, entrypoint=entry, args=list(args), conf=conf_map, env=env_map, py_files=list(py_files),
        group=group, priority=priority, runner=_choice(_RUNNERS, runner, "runner"),
        misfire=_choice(_MISFIRE, misfire, "misfire"), misfire_catch_up_limit=catch_up_limit,
        overlap=_choice(_OVERLAP, overlap, "overlap"), routing=_choice(_ROUTING, routing, "routing"),
        routing_key=routing_key, labels=labels or {}, submit_dir=str(base),
    )
    packed: Bundle | None = None
    parsed = parse_entrypoint(entry)
    shipped_py, shipped_files = _paths(py_files, base), _paths(files, base)
    if ship and (parsed.is_file or bundle or shipped_py or shipped_files):
        packed = build_bundle(Path(parsed.path) if parsed.is_file else None, parsed.func, submit_dir=base,
                              bundle_dir=_paths([bundle], base)[0] if bundle else None,
                              py_files=shipped_py, files=shipped_files)
        spec.entrypoint = packed.entrypoint or entry
        del spec.py_files[:]
        spec.py_files.extend(packed.py_files)
        spec.bundle.digest, spec.bundle.size = packed.digest, len(packed.data)
    elif files or bundle:
        raise errors.InvalidArgument("files: --files and --bundle ship files, which --no-ship turns off")
    if cwd:
        if not cwd.startswith("/"):
            raise errors.InvalidArgument(f"cwd: {cwd!r} must be an absolute path (on the workers)")
        spec.cwd = cwd
    if task_memory not in (None, "", 0):
        try:
            spec.task_memory_mb = max(1, parse_size(task_memory, field="task_memory", default_unit="m") >> 20)
        except ValueError as exc:
            raise errors.InvalidArgument(str(exc)) from None
    spec.retry.max_attempts = retries + 1
    for field, value in (("backoff", backoff), ("max_backoff", max_backoff)):
        seconds = _duration(value, field)
        if seconds is not None:
            target = spec.retry.initial_backoff if field == "backoff" else spec.retry.max_backoff
            target.FromMilliseconds(int(seconds * 1000))
    seconds = _duration(timeout, "timeout")
    if seconds is not None:
        spec.timeout.FromMilliseconds(int(seconds * 1000))
    trig = spec.trigger
    if delay not in (None, ""):
        trig.delay.FromMilliseconds(int((_duration(delay, "delay") or 0) * 1000))
    elif at not in (None, ""):
        trig.at.FromMilliseconds(int((_instant(at, "at") or 0) * 1000))
    elif cron:
        trig.cron.expr, trig.cron.tz = cron, tz
    elif every not in (None, ""):
        trig.every.interval.FromMilliseconds(int((_duration(every, "every") or 0) * 1000))
        trig.every.fixed_delay = fixed_delay
    else:
        trig.now = True
    if tz and not cron:
        raise errors.InvalidArgument("tz: --tz applies to --cron")
    if fixed_delay and every in (None, ""):
        raise errors.InvalidArgument("fixed_delay: --fixed-delay applies to --every")
    for field, value in (("start_at", start_at), ("end_at", end_at)):
        moment = _instant(value, field)
        if moment is not None:
            getattr(trig, field).FromMilliseconds(int(moment * 1000))
    trig.max_runs = max_runs
    split = spec.split
    for item in inputs:
        if isinstance(item, tuple):
            split.inputs.add(value=item[0], mark=item[1])
        else:
            split.inputs.add(value=item)
    split.parallelism = parallelism
    split.max_bytes_per_sec, split.max_records_per_sec = max_bytes_per_sec, max_records_per_sec
    split.task_bytes_per_sec, split.task_records_per_sec = task_bytes_per_sec, task_records_per_sec
    split.max_concurrent = max_concurrent
    return spec, packed


def first_run_id(job: pb.Job) -> str:
    """The id the job's next firing will have (a run id is job id + scheduled time)."""
    if not job.HasField("next_fire_at"):
        if job.last_run_id:
            return job.last_run_id
        raise errors.FailedPrecondition(f"job {job.id} has no next firing")
    return f"{job.id}.{job.next_fire_at.ToMilliseconds():013d}"


class Client:
    def __init__(self, master: str | None = None, *, token: str | None = None, timeout: float | None = None,
                 config_file: str | None = None) -> None:
        cfg = load(ClientConfig, "client", config_file=config_file,
                   overrides={"master": master, "token": token, "call_timeout_s": timeout})
        self.master = cfg.master
        self._timeout = cfg.call_timeout_s
        self._metadata = [("authorization", f"Bearer {cfg.token}")] if cfg.token else []
        self._channel = grpc.insecure_channel(cfg.master, options=[
            ("grpc.service_config", _SERVICE_CONFIG), ("grpc.enable_retries", 1),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ])
        self._jobs = pbg.JobServiceStub(self._channel)
        self._cluster = pbg.ClusterServiceStub(self._channel)
        self._bundles = pbg.BundleServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: Any, request: Any, timeout: float | None = None) -> Any:
        try:
            return method(request, timeout=timeout or self._timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise translate(exc, self.master) from None

    # ---- jobs --------------------------------------------------------------------------------------------

    def submit(self, entrypoint: str, *, idempotency_key: str | None = None, **options: Any) -> pb.Job:
        """Submit a job (see :func:`prepare` for the options), uploading its files first when the master
        does not have them yet; returns the stored job."""
        return self.submit_spec(build_spec(entrypoint, **options), idempotency_key).job

    def _upload_for(self, specs: Sequence[pb.JobSpec]) -> None:
        """Upload the bundles these specs name that this process built (each digest once)."""
        for digest in dict.fromkeys(s.bundle.digest for s in specs if s.bundle.digest):
            packed = built(digest)
            if packed is not None:
                self.upload(packed)

    def upload(self, packed: Bundle) -> None:
        """Store a bundle on the master unless it is there already (content-addressed: sent once)."""
        ref = pb.BundleRef(digest=packed.digest, size=len(packed.data))
        have = self._call(self._bundles.HasBundle, ref)
        if have.present:
            return
        if have.max_bytes and ref.size > have.max_bytes:
            raise errors.ResourceExhausted(
                f"bundle is {format_size(ref.size)}, over the master's limit of {format_size(have.max_bytes)} "
                "(--max-bundle); ship less (.sparkyardignore) or raise the limit")
        parts = chunks(packed.data)
        messages = [pb.BundleChunk(ref=ref, data=parts[0]), *(pb.BundleChunk(data=p) for p in parts[1:])]
        self._call(self._bundles.UploadBundle, iter(messages), timeout=max(self._timeout, ref.size / 1e6))

    def submit_spec(self, spec: pb.JobSpec, idempotency_key: str | None = None) -> pb.SubmitJobResponse:
        self._upload_for([spec])
        request = pb.SubmitJobRequest(spec=spec, idempotency_key=idempotency_key or uuid.uuid4().hex)
        return self._call(self._jobs.SubmitJob, request)

    def submit_many(self, specs: Sequence[pb.JobSpec]) -> list[pb.Job]:
        """Submit many jobs in one call (all validated first; one bad spec rejects the call)."""
        self._upload_for(specs)
        request = pb.SubmitJobsRequest(jobs=[pb.SubmitJobRequest(spec=s, idempotency_key=uuid.uuid4().hex)
                                             for s in specs])
        return [r.job for r in self._call(self._jobs.SubmitJobs, request).jobs]

    def job(self, job_id: str) -> pb.Job:
        return self._call(self._jobs.GetJob, pb.GetJobRequest(job_id=job_id))

    def jobs(self, *, limit: int = 0, state: str = "", group: str = "") -> list[pb.Job]:
        enum = pb.JobState.Value(f"JOB_{state.upper()}") if state else pb.JOB_STATE_UNSPECIFIED
        return list(self._call(self._jobs.ListJobs, pb.ListJobsRequest(limit=limit, state=enum, group=group)).jobs)

    def cancel(self, target_id: str, reason: str = "") -> list[str]:
        return list(self._call(self._jobs.Cancel, pb.CancelRequest(id=target_id, reason=reason)).cancelled)

    def pause(self, job_id: str) -> pb.Job:
        return self._call(self._jobs.PauseJob, pb.JobIdRequest(job_id=job_id))

    def resume(self, job_id: str) -> pb.Job:
        return self._call(self._jobs.ResumeJob, pb.JobIdRequest(job_id=job_id))

    def trigger(self, job_id: str) -> pb.Run:
        return self._call(self._jobs.TriggerJob, pb.JobIdRequest(job_id=job_id)).run

    # ---- runs --------------------------------------------------------------------------------------------

    def runs(self, job_id: str, *, limit: int = 0, with_tasks: bool = False) -> list[pb.Run]:
        request = pb.ListRunsRequest(job_id=job_id, limit=limit, with_tasks=with_tasks)
        return list(self._call(self._jobs.ListRuns, request).runs)

    def run(self, run_id: str) -> pb.Run:
        return self._call(self._jobs.GetRun, pb.GetRunRequest(run_id=run_id))

    def wait(self, run_id: str, timeout: float | str | None = None) -> tuple[pb.Run, bool]:
        """Block until the run ends or ``timeout`` passes (None: no limit); returns (run, timed_out)."""
        total = _duration(timeout, "timeout")
        waited = 0.0
        while True:
            step = WAIT_STEP_S if total is None else max(0.001, min(WAIT_STEP_S, total - waited))
            request = pb.WaitRunRequest(run_id=run_id)
            request.timeout.FromMilliseconds(int(step * 1000))
            reply = self._call(self._jobs.WaitRun, request, timeout=step + self._timeout)
            waited += step
            if not reply.timed_out or (total is not None and waited >= total):
                return reply.run, reply.timed_out

    first_run_id = staticmethod(first_run_id)

    def logs(self, task_id: str, *, attempt: int = 0, follow: bool = False, offset: int = 0) -> Iterator[bytes]:
        """The log of a task's attempt (latest by default), chunk by chunk; ``follow`` streams until it ends."""
        request = pb.StreamTaskLogRequest(task_id=task_id, attempt=attempt, follow=follow, offset=offset)
        try:
            for chunk in self._jobs.StreamTaskLog(request, metadata=self._metadata,
                                                  timeout=None if follow else self._timeout * 4):
                if chunk.data:
                    yield chunk.data
        except grpc.RpcError as exc:
            raise translate(exc, self.master) from None

    # ---- cluster -----------------------------------------------------------------------------------------

    def workers(self, *, include_dead: bool = False) -> list[pb.WorkerInfo]:
        return list(self._call(self._cluster.ListWorkers, pb.ListWorkersRequest(include_dead=include_dead)).workers)

    def status(self) -> pb.StatusResponse:
        return self._call(self._cluster.GetStatus, pb.GetStatusRequest())
