"""The soak's workload, every effect of it recorded: what was asked (each submit the master acknowledged, each
trigger), and what ran (the ledger file every task writes, tests/cluster/hostsite/cluster_jobs.py).

* an every-second cron job (``* * * * * *``, misfire catch-up: a missed second is fired late, never
  dropped) of 0.2 s tasks;
* one after another, every few seconds: a split run (3 tasks of 1 s), a task whose first attempt fails
  (retried), a task that commits fenced output, a trigger of a 6-step pipeline with fan-out and fan-in.

Every job has retries (a killed driver or a full disk fails an attempt: that is the job's own failure, not
the scheduler losing it) and the masters allow many lost leases (``--max-lost``). A submit carries an
idempotency key and is repeated with it until a master acknowledges it (or gives up after a deadline, then
it is counted as not acknowledged, never as lost).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

from netcluster import NetCluster
from sparkyard import errors
from sparkyard.client import Client, first_run_id
from sparkyard.pipeline import Pipeline

T = TypeVar("T")
RETRIES = {"retries": 20, "backoff": "0.5s", "max_backoff": "4s"}
ANSWER_WITHIN_S = 60.0
KINDS = ("split", "flaky", "fenced", "pipeline")


@dataclass
class Workload:
    net: NetCluster
    client: Client
    ledger: Path
    every_s: float = 4.0
    cron_job: str = ""
    pipeline_job: str = ""
    step_jobs: list[str] = field(default_factory=list)
    acknowledged: dict[str, str] = field(default_factory=dict)  # job id → kind, for every acknowledged submit
    fenced: dict[str, Path] = field(default_factory=dict)  # job id → its final output path
    pipeline_runs: list[str] = field(default_factory=list)  # acknowledged triggers
    unanswered: list[str] = field(default_factory=list)  # submits and triggers no master acknowledged in time
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _answered(self, call: Callable[[], T], what: str) -> T | None:
        """``call`` repeated while no master can answer it, for at most ANSWER_WITHIN_S."""
        deadline = time.monotonic() + ANSWER_WITHIN_S
        while True:
            try:
                return call()
            except errors.Unavailable as exc:
                if time.monotonic() > deadline:
                    self.unanswered.append(f"{what}: {exc}")
                    return None
                time.sleep(0.5)
            except errors.SparkyardError as exc:  # refused for good: not acknowledged; the workload goes on
                self.unanswered.append(f"{what}: refused: {exc}")
                return None

    def _submit(self, kind: str, key: str, entrypoint: str, **options: object) -> str | None:
        job = self._answered(lambda: self.client.submit(entrypoint, idempotency_key=key, base_dir=self.net.submit_dir,
                                                        **RETRIES, **options), f"submit {key}")
        if job is None:
            return None
        self.acknowledged[job.id] = kind
        return job.id

    def start(self) -> None:
        """The cron job and the pipeline, then the loop of one-off submits (in a thread)."""
        self.cron_job = self._submit("cron", "soak-cron", "cluster_jobs:ledger", args=[str(self.ledger), "0.2"],
                                     cron="* * * * * *", misfire="catch-up", catch_up_limit=1000) or ""
        assert self.cron_job, f"the cron job was not acknowledged: {self.unanswered}"
        p = Pipeline("soak-pipeline", base_dir=self.net.submit_dir)

        def step(name: str, after: list[object]) -> object:
            return p.step(name, "cluster_jobs:ledger", args=[str(self.ledger), "0.2"], after=after, **RETRIES)

        extract = step("extract", [])
        parts = [step(f"part{i}", [extract]) for i in range(3)]
        step("publish", [step("join", parts)])
        spec = p.to_spec()
        response = self._answered(lambda: self.client.submit_spec(spec, "soak-pipeline"), "the pipeline")
        assert response is not None, f"the pipeline was not acknowledged: {self.unanswered}"
        self.pipeline_job = response.job.id
        self.step_jobs = [s.job_id for s in response.job.spec.steps]
        self._thread = threading.Thread(target=self._loop, name="workload", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        for n in itertools.count():
            if self._stop.wait(self.every_s):
                return
            kind = KINDS[n % len(KINDS)]
            key = f"soak-{kind}-{n}"
            if kind == "split":
                self._submit(kind, key, "cluster_jobs:ledger", args=[str(self.ledger), "1"], parallelism=3)
            elif kind == "flaky":
                self._submit(kind, key, "cluster_jobs:flaky_ledger", args=[str(self.ledger), "0.3"])
            elif kind == "fenced":
                final = self.net.root / "outputs" / key
                job = self._submit(kind, key, "cluster_jobs:fenced_ledger", args=[str(self.ledger), "0.5", str(final)])
                if job:
                    self.fenced[job] = final
            else:
                run = self._answered(lambda: self.client.trigger(self.pipeline_job), f"trigger {n}")
                if run is not None:
                    self.pipeline_runs.append(run.id)

    def stop(self) -> None:
        """No more submits; the cron job paused (its missed seconds still fire, then nothing)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=ANSWER_WITHIN_S + 30)
        self._answered(lambda: self.client.pause(self.cron_job), "pause the cron job")

    def job_ids(self) -> list[str]:
        return [*self.acknowledged, self.pipeline_job, *self.step_jobs]

    def first_run(self, job_id: str) -> str:
        return first_run_id(self.client.job(job_id))
