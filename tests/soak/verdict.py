"""The soak's checker: the ledger's invariants (tests/cluster/ledger.py) and those of the soak's own workload.

Counted by kind, each with its messages: lost firings, duplicate firings, tasks succeeded twice (or a
success nobody ran), overlapping executions of one task, acknowledged submits lost, committed outputs from a
stale attempt, runs that never ended, processes (drivers, JVMs: Spark applications) left behind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ledger import KINDS as LEDGER_KINDS
from ledger import Findings, audit, read
from netcluster import NetCluster, wait_until
from netns import netns_pids
from sparkyard import errors
from sparkyard.client import Client
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.fenced_output import FencedOutput
from workload import Workload

KINDS = (*LEDGER_KINDS, "acknowledged submit lost", "stale output committed", "process left behind")
OPEN = (pb.RUN_SCHEDULED, pb.RUN_RUNNING)


@dataclass
class Verdict:
    findings: Findings = field(default_factory=Findings)
    quiet_after_s: float | None = None  # from the heal to every run ended (None: not within the deadline)
    stored_unanswered: list[str] = field(default_factory=list)  # submits never answered that the master stored

    def counts(self) -> dict[str, int]:
        return {kind: self.findings.by_kind.get(kind, 0) for kind in KINDS}

    @property
    def ok(self) -> bool:
        return not self.findings.violations


def wait_quiet(client: Client, jobs: list[str], timeout: float) -> float | None:
    """Seconds until no run of ``jobs`` is scheduled or running (None if that did not happen in ``timeout``)."""
    started = time.monotonic()

    def open_runs(job_id: str) -> bool:
        try:
            return any(r.state in OPEN for r in client.runs(job_id, limit=100_000))
        except errors.NotFound:  # a job the scheduler lost: the checker reports it
            return False

    def quiet() -> bool:
        try:
            return not any(open_runs(j) for j in jobs)
        except errors.Unavailable:
            return False

    try:
        wait_until(quiet, timeout, "every run to end", interval=2.0)
    except AssertionError:
        return None
    return time.monotonic() - started


def unanswered_that_ran(workload: Workload, ledger: Path) -> list[str]:
    """The jobs in the ledger that no answer named (submits whose reply the client never got)."""
    return sorted({ex.job for ex in read(ledger)} - set(workload.job_ids()))


def check(workload: Workload, client: Client, ledger: Path) -> Verdict:
    """Everything but the leftovers (see :func:`leftovers`), once the cluster is quiet."""
    verdict = Verdict()
    # A job in the ledger that no answer named: a submit whose reply was lost (the master stored it; the
    # client gave up before an answer came). Its outcome was unknown to the client, so it is no violation
    # to have run it, only to have lost it since: kept, it is audited like every acknowledged job.
    lost: list[str] = []
    for job_id in unanswered_that_ran(workload, ledger):
        try:
            client.job(job_id)
            verdict.stored_unanswered.append(job_id)
        except errors.NotFound:
            lost.append(job_id)
    found = verdict.findings = audit(ledger, client, [*workload.job_ids(), *verdict.stored_unanswered],
                                     period_ms={workload.cron_job: 1000})
    for job_id in lost:
        found.add("lost firing", f"job {job_id} ran (the ledger has it), was never acknowledged to the client, and "
                                 "the scheduler has no such job now: stored, ran and then lost (a write to a stale "
                                 "Redis primary?)")
    for job_id, kind in workload.acknowledged.items():
        try:
            client.job(job_id)
        except errors.NotFound:
            found.add("acknowledged submit lost", f"{kind} job {job_id} was acknowledged, and is gone")
    for run_id in workload.pipeline_runs:
        try:
            run = client.run(run_id)
        except errors.NotFound:
            found.add("acknowledged submit lost", f"pipeline run {run_id} was acknowledged, and is gone")
            continue
        if run.state != pb.RUN_SUCCEEDED or any(s.state != pb.STEP_SUCCEEDED for s in run.steps):
            found.add("run not ended" if run.state in OPEN else "lost firing",
                      f"pipeline run {run_id}: {pb.RunState.Name(run.state)}, steps "
                      f"{[pb.StepState.Name(s.state) for s in run.steps]}")
    for job_id, final in workload.fenced.items():
        try:
            runs = client.runs(job_id, limit=10, with_tasks=True)
        except errors.NotFound:  # counted above as an acknowledged submit lost
            continue
        won = [a.fencing_token for r in runs for t in r.tasks for a in t.attempts if a.state == pb.ATTEMPT_SUCCEEDED]
        published = FencedOutput(final).record().token
        if won and published != won[-1]:
            found.add("stale output committed", f"job {job_id}: {final} holds token {published}'s output, the "
                                                f"task's SUCCEEDED attempt has token {won[-1]}")
    return verdict


def leftovers(net: NetCluster, found: Findings) -> None:
    """Once every server process has exited (stopped by pid), nothing may be left on any host."""
    for host in net.network.hosts.values():
        for pid in netns_pids(host.netns):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            found.add("process left behind", f"{host.name}: pid {pid}: {cmd[:200]}")
