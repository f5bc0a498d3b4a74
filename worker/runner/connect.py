"""The connect runner: each attempt gets a Spark Connect session of its own, on the worker's server.

Spark runs in one place, the worker's Spark Connect server (worker/connect_server.py: supervised by the
worker, or given with ``--connect-url``); task code runs in a pool of warm client processes, one per slot.
These are the session runner's driver processes started in their ``connect`` mode — no JVM, no Spark of
their own (worker/remote_spark.py) — so this runner is the session runner with another Spark behind the
same process pool, socket protocol, per-attempt process state, kill grace, memory limit and recycling.

Why a pool of client processes rather than the sessions being made in the worker: task code never runs in
the worker process (an ``os._exit``, a segfault in a C extension, a runaway allocation or a blocked thread
would take the worker and all its attempts along), and a client process is cheap to keep warm — a Python
process with pyspark's connect client imported, ~0.1 s of CPU per attempt less than starting one. A fresh
remote session per attempt (not one per client process) keeps attempts apart on the server: own SQL conf,
temp views, UDFs, artifacts, and a tag to interrupt exactly its operations.

The worker offers slots only while its server accepts connections: none while the server starts or is
being restarted, and attempts already given to the runner wait for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from sparkyard import resources
from sparkyard.config import DEFAULT_DRIVER_FROZEN_LIMIT_S, DEFAULT_DRIVER_MAX_TASKS, DEFAULT_RUNNER_WAIT_MAX_S
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.children import Children
from sparkyard.worker.logs import LogFiles
from sparkyard.worker.class_archive import ClassArchive
from sparkyard.worker.connect_server import ConnectServer
from sparkyard.worker.remote_spark import CONNECT_MODE
from sparkyard.worker.runner.base import AttemptRun
from sparkyard.worker.runner.driver_process import DriverProcess, Job
from sparkyard.worker.runner.session import SessionRunner


class ConnectRunner(SessionRunner):
    name = "connect"
    drivers = "Spark Connect clients"
    process_kind = "Spark Connect client"
    files_by_name = False  # each attempt's session has artifacts of its own

    def __init__(self, connect_url: str, spark_master: str, slots: int, work_dir: Path, children: Children, *,
                 conf: dict[str, str] | None = None, task_memory_mb: int = 0,
                 max_tasks: int = DEFAULT_DRIVER_MAX_TASKS, wait_max_s: float = DEFAULT_RUNNER_WAIT_MAX_S,
                 on_readiness: Callable[[], None] | None = None, archive: ClassArchive | None = None,
                 logs: LogFiles, frozen_limit_s: float = DEFAULT_DRIVER_FROZEN_LIMIT_S) -> None:
        super().__init__(CONNECT_MODE, slots, work_dir / "connect", children, task_memory_mb=task_memory_mb,
                         max_tasks=max_tasks, wait_max_s=wait_max_s, on_readiness=on_readiness, logs=logs,
                         frozen_limit_s=frozen_limit_s)
        self.server = ConnectServer(connect_url, spark_master or f"local[{slots}]", dict(conf or {}),
                                    work_dir / "connect", children, self._server_changed, archive)

    async def start(self) -> None:
        self.server.start()
        await super().start()

    async def close(self) -> None:
        await super().close()
        await self.server.close()

    def readiness(self) -> tuple[int, str, int]:
        state, reason, ready = super().readiness()
        if self.server.ready:
            return state, reason, ready
        return pb.READINESS_DEGRADED if self.server.failed else pb.READINESS_STARTING, self.server.reason, 0

    def engine_changed(self, problem: str) -> None:
        """The client processes have no Spark of their own; the server's application is what is lost."""
        self.server.engine_changed(problem)

    def _server_changed(self) -> None:
        self._on_readiness()
        self._dispatch()

    def _dispatch(self) -> None:
        if self.server.ready:  # attempts wait for the server, not fail against it
            super()._dispatch()

    def driver_conf(self, driver: DriverProcess) -> dict[str, str]:
        return self.conf  # a client process has no JVM

    def job_conf(self, spec: pb.JobSpec) -> dict[str, str]:
        """The job's --conf alone: the server's application has its sizes already (said by :meth:`notices`)."""
        return dict(spec.conf)

    def notices(self, attempt: AttemptRun) -> list[str]:
        """The job's resources the shared server cannot take (its --py-files do reach the server)."""
        notice = resources.shared_app_notice(attempt.assignment.spec, self.name)
        return [notice] if notice else []

    def _run_message(self, job: Job) -> dict[str, Any]:
        message = super()._run_message(job)
        attempt = job.attempt
        ws = attempt.workspace
        message["connect"] = {"url": self.server.url, "tag": attempt.tag, "bundle_root": ws.bundle_root,
                              "py_files": list(ws.py_files), "scratch": str(attempt.work_dir),
                              "session_jobs": self.server.plugin is not None,
                              "paths_elsewhere": self.server.paths_elsewhere,
                              "functions_dir": self.server.functions_dir,
                              "functions_follow": self.server.functions_follow}
        return message
