"""Child jobs (``--after JOB[:succeeded|failed|always]``): when a run of a parent job ends so, the leader fires
each ACTIVE child of it.

A child's run is a firing outside any schedule. Its scheduled time is the parent run's, so ``ctx.scheduled_at``
all down a chain is the logical time of the run that started it (a nightly ETL's date); its id carries the time
in the parent run's id, so one parent run makes at most one run of each child, whoever fires it and however
often (fire.lua creates a run id once). A paused child skips the parent's run (fire.lua's ``after`` mode); a
child submitted after a parent run ended is not fired for it. ``always`` means SUCCEEDED, FAILED or CANCELLED
(a SKIPPED run did not run).

The leader learns of run ends from :class:`sparkyard.master.events.RunEnded`. It keeps the parents in memory,
read again every :data:`REFRESH_S` (a child may be submitted through another master), so the end of a run
of a job without children costs nothing. A run end the leader did not get to act on — it died between the
end and the firing, or the child was new to it — is found by going over the parent's latest runs that ended
within :data:`RECOVERY_WINDOW_MS`: for every parent when a leadership starts, and for a parent when it
first appears. The run ids make doing it twice harmless.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sparkyard.master.records import RunRecord
from sparkyard.master.scripts import log_failure
from sparkyard.master.store_outcomes import FireStatus
from sparkyard.states import JobState, RunState
from sparkyard.v1 import sparkyard_pb2 as pb

if TYPE_CHECKING:
    from sparkyard.master.background import Spawner
    from sparkyard.master.events import RunEnded
    from sparkyard.master.preloader import Preloader
    from sparkyard.master.store import Store
    from sparkyard.master.timer import SystemTimer, TimerTask

log = logging.getLogger(__name__)

# How often the leader reads the set of parent jobs.
REFRESH_S = 1.0
# How far back a new leader (or a newly seen parent) looks for run ends whose children were not fired: longer
# than any change of leader or restart of a supervised master takes.
RECOVERY_WINDOW_MS = 10 * 60 * 1000
# The latest runs of a parent looked at then.
RECOVERY_RUNS = 20
# A firing refused because the child was updated since it was read is tried again this many times.
FIRE_ATTEMPTS = 3

WHEN: dict[int, frozenset[RunState]] = {
    pb.AFTER_SUCCEEDED: frozenset({RunState.SUCCEEDED}),
    pb.AFTER_FAILED: frozenset({RunState.FAILED}),
    pb.AFTER_ALWAYS: frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED}),
}
ANY_END = WHEN[pb.AFTER_ALWAYS]


class ChildJobs:
    def __init__(self, store: Store, preloader: Preloader, timer: SystemTimer, background: Spawner) -> None:
        self._store = store
        self._preloader = preloader
        self._timer = timer
        self._background = background
        self._parents: set[str] = set()
        self._timer_task: TimerTask | None = None
        self._running = False

    async def start(self) -> None:
        """Start with a leadership: every parent's recent run ends are gone over once."""
        self._running = True
        self._parents = set()
        self._background.spawn(self._refresh(), "child-jobs")

    async def stop(self) -> None:
        self._running = False
        self._parents = set()
        if self._timer_task is not None:
            self._timer_task.cancel()
            self._timer_task = None

    def run_ended(self, event: RunEnded) -> None:
        if event.state in ANY_END and event.job_id in self._parents:
            self._background.spawn(self._fire_children(event.run_id), f"children-of-{event.run_id}")

    def _due(self) -> None:
        self._timer_task = None
        self._background.spawn(self._refresh(), "child-jobs")

    async def _refresh(self) -> None:
        try:
            parents = await self._store.parents()
            new = parents - self._parents
            self._parents = parents
            for parent in sorted(new):
                await self._recover(parent)
        except Exception:
            log_failure(log, "reading the parents of child jobs failed; next try in %.0fs", REFRESH_S)
        finally:
            if self._running and self._timer_task is None:
                self._timer_task = self._timer.schedule(REFRESH_S, self._due)

    async def _recover(self, parent: str) -> None:
        store = self._store
        since = await store.time_ms() - RECOVERY_WINDOW_MS
        for run in await store.list_runs(parent, RECOVERY_RUNS):
            if run.state in ANY_END and run.finished_ms >= since:
                await self._fire_children(run.id, run)

    async def _fire_children(self, run_id: str, run: RunRecord | None = None) -> None:
        store = self._store
        run = run or await store.get_run(run_id, with_tasks=False)
        if run is None:
            return
        for child_id in await store.children(run.job_id):
            for _ in range(FIRE_ATTEMPTS):
                job = await store.get_job(child_id)
                if (job is None or job.state is not JobState.ACTIVE or job.created_ms > run.finished_ms
                        or run.state not in WHEN.get(job.spec.trigger.after.when, frozenset())):
                    break
                status = await self._preloader.fire_child(job.id, job.spec, job.spec_version, run)
                if status is not FireStatus.CHANGED:  # an update came between the read and the firing: read it again
                    if status is not FireStatus.EXISTS:
                        log.info("job=%s fired after run=%s ended %s: %s", job.id, run.id, run.state.value,
                                 status.value)
                    break
