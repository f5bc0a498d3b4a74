"""``WaitRun``: a caller parked in the purgatory until a run ends or its deadline passes.

Apart from :mod:`sparkyard.master.jobs` (what users do with jobs and runs), since waiting is a concern of its
own: the purgatory, the master's longest wait, and a read of the run around parking the caller so that an end
between the two is not missed. It reads jobs and runs through the job manager, which knows nothing of it.
"""

from __future__ import annotations

import asyncio

from sparkyard import ids
from sparkyard.errors import FailedPrecondition, InvalidArgument
from sparkyard.master.jobs import JobManager
from sparkyard.master.purgatory import DelayedOperation, Purgatory
from sparkyard.master.records import RunRecord
from sparkyard.master.store import Store
from sparkyard.states import RUN_TERMINAL, JobState


class RunWaiter(DelayedOperation):
    """A WaitRun call parked in the purgatory until its run ends or its deadline passes.

    It watches its run id and its job id; the master completes those watchers when the run ends or the
    job is cancelled (:meth:`Purgatory.complete_watchers`). Whether the run had already ended is read from
    Redis by :meth:`RunWaits.wait_run` around parking it, so there is nothing to check here.
    """

    def __init__(self, timeout_s: float) -> None:
        super().__init__(timeout_s)
        self.future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(True)

    def on_expiration(self) -> None:
        if not self.future.done():
            self.future.set_result(False)


class RunWaits:
    def __init__(self, store: Store, purgatory: Purgatory, jobs: JobManager, wait_max_s: float) -> None:
        self._store = store
        self._purgatory = purgatory
        self._jobs = jobs
        self._wait_max_s = wait_max_s

    async def wait_run(self, run_id: str, timeout_s: float, *,
                       tasks_while_running: bool = True) -> tuple[RunRecord | None, bool]:
        """Block until the run is terminal or ``timeout_s`` passes; returns (run, timed_out).

        The run may not exist yet (a delayed job's first run): the wait then covers its creation too,
        and ends early if the job is cancelled before it fires. The run is None if it never fired. Without
        ``tasks_while_running`` a run that has not ended comes without its tasks (a waiter that calls again has
        no use for them, and reading thousands of them each time is the master's CPU and Redis's).
        """
        if timeout_s < 0:
            raise InvalidArgument("timeout: must not be negative")
        timeout_s = min(timeout_s or self._wait_max_s, self._wait_max_s)
        JobManager.check_id(run_id, ids.IdKind.RUN)
        job_id = run_id.split(".", 1)[0]
        run = await self._store.get_run(run_id, with_tasks=False)
        if run is None:
            await self._jobs.get_job(job_id)
        elif run.state in RUN_TERMINAL:
            return await self._jobs.get_run(run_id), False
        waiter = RunWaiter(timeout_s)
        self._purgatory.try_complete_else_watch(waiter, [run_id, job_id])
        try:
            # The run may have ended between the read above and the watch: look once more.
            again = await self._store.get_run(run_id, with_tasks=False)
            if again is not None and again.state in RUN_TERMINAL:
                waiter.force_complete()
            await waiter.future
        finally:
            if not waiter.is_completed:
                waiter.force_complete()  # the caller went away: free the watcher and its timer now
        run = await self._store.get_run(run_id, with_tasks=tasks_while_running)
        if run is None:
            job = await self._jobs.get_job(job_id)
            if job.state == JobState.CANCELLED:
                raise FailedPrecondition(f"job {job_id} was cancelled before run {run_id} fired")
            return None, True
        if run.state in RUN_TERMINAL and not tasks_while_running:
            run = await self._jobs.get_run(run_id)  # ended: with its tasks after all
        return run, run.state not in RUN_TERMINAL
