"""Pipelines in the master and its Lua scripts: which steps run when (trigger rules, fan-out, fan-in), each
made once, the run's end told once, cancel — over a RedisStore timed by a fake clock."""

from __future__ import annotations

import pytest

from clocked_store import ClockedStores, settle
from master_rig import MasterRig
from sparkyard import ids
from sparkyard.clock import FakeClock
from sparkyard.config import MasterConfig
from sparkyard.errors import FailedPrecondition, InvalidArgument
from sparkyard.master.events import RunEnded
from sparkyard.master.store_outcomes import PipelineEnd
from sparkyard.master.store_values import Claim, Report, RetentionBounds
from sparkyard.pipeline_spec import normalize_pipeline
from sparkyard.spec import SpecError
from sparkyard.states import RunState, StepState
from sparkyard.v1 import sparkyard_pb2 as pb


def pipeline(*steps: tuple[str, list[str], int], name: str = "etl") -> pb.JobSpec:
    spec = pb.JobSpec(name=name, trigger=pb.Trigger(manual=True))
    for step, after, rule in steps:
        spec.steps.add(name=step, after=after, trigger_rule=rule,
                       spec=pb.JobSpec(entrypoint=f"/jobs/{step}.py:main"))
    return spec


class Rig(MasterRig):
    ended: list[tuple[str, RunState]]

    async def start(self, spec: pb.JobSpec) -> str:
        job = (await self.master.jobs.submit(spec)).job
        return (await self.master.jobs.trigger(job.id)).id

    async def steps(self, run_id: str) -> dict[str, StepState]:
        run = await self.store.get_run(run_id)
        assert run is not None
        return {s.name: s.state for s in run.steps}

    async def finish(self, run_id: str, step: str, outcome: str = "SUCCEEDED", result: str = "") -> Claim:
        """Run the step's one task to ``outcome`` as a worker would; the claim it ran under."""
        run = await self.store.get_run(run_id)
        assert run is not None
        (s,) = [s for s in run.steps if s.name == step]
        (claim,) = await self.store.claim("default", [(ids.task_id(s.run_id, 0), "w1")], lease_ms=60_000,
                                          timeout_grace_ms=0)
        self.clock.advance(1)
        self.outcomes.apply_verdicts(await self.store.report([Report(claim.task_id, claim.token, outcome, result)]))
        await self.settle()
        return claim


@pytest.fixture
async def rig(clocked_stores: ClockedStores) -> Rig:
    return await _rig(clocked_stores)


async def _rig(clocked_stores: ClockedStores, cfg: MasterConfig | None = None) -> Rig:
    clock = FakeClock()
    r = Rig(clock, await clocked_stores.make(clock), cfg)
    r.ended = []
    r.master.events._sealed = False
    r.master.events.subscribe(RunEnded, lambda e: r.ended.append((e.run_id, e.state)))
    r.master.events.seal()
    return r


OK, DONE, ONE_FAILED, NONE_FAILED = pb.ALL_SUCCEEDED, pb.ALL_DONE, pb.ONE_FAILED, pb.NONE_FAILED


async def test_steps_run_in_graph_order_with_fan_out_and_fan_in_and_the_run_ends_once(rig: Rig) -> None:
    run = await rig.start(pipeline(("extract", [], OK), ("orders", ["extract"], OK), ("customers", ["extract"], OK),
                                   ("join", ["orders", "customers"], OK)))
    assert await rig.steps(run) == {"extract": StepState.RUNNING, "orders": StepState.PENDING,
                                    "customers": StepState.PENDING, "join": StepState.PENDING}
    await rig.finish(run, "extract")
    assert await rig.steps(run) == {"extract": StepState.SUCCEEDED, "orders": StepState.RUNNING,
                                    "customers": StepState.RUNNING, "join": StepState.PENDING}
    await rig.finish(run, "orders")
    assert (await rig.steps(run))["join"] is StepState.PENDING  # fan-in waits for both
    await rig.finish(run, "customers")
    assert (await rig.steps(run))["join"] is StepState.RUNNING
    assert [e for e in rig.ended if e[0] == run] == []
    await rig.finish(run, "join")
    record = await rig.store.get_run(run)
    assert record is not None and record.state is RunState.SUCCEEDED
    assert [e for e in rig.ended if e[0] == run] == [(run, RunState.SUCCEEDED)]
    assert rig.master.metrics.pipeline_runs.labels("SUCCEEDED")._value.get() == 1
    # Every step's run is a run of its own job, of the pipeline run's time, marked with the pipeline run.
    for step in record.steps:
        step_run = await rig.store.get_run(step.run_id, with_tasks=False)
        assert step_run is not None and step_run.pipeline_run == run
        assert ids.parse_run_ms(step.run_id) == ids.parse_run_ms(run)


async def test_trigger_rules_decide_what_runs_after_a_failure(rig: Rig) -> None:
    run = await rig.start(pipeline(("a", [], OK), ("b", ["a"], OK), ("c", ["b"], OK), ("cleanup", ["b"], DONE),
                                   ("alert", ["a"], ONE_FAILED), ("report", ["c"], NONE_FAILED)))
    await rig.finish(run, "a", "FAILED")
    assert await rig.steps(run) == {
        "a": StepState.FAILED, "b": StepState.UPSTREAM_FAILED, "c": StepState.UPSTREAM_FAILED,
        "cleanup": StepState.RUNNING, "alert": StepState.RUNNING, "report": StepState.UPSTREAM_FAILED}
    await rig.finish(run, "cleanup")
    await rig.finish(run, "alert")
    record = await rig.store.get_run(run)
    assert record is not None and record.state is RunState.FAILED
    assert rig.ended.count((run, RunState.FAILED)) == 1


async def test_one_failed_is_skipped_when_nothing_failed_and_skips_propagate(rig: Rig) -> None:
    run = await rig.start(pipeline(("a", [], OK), ("alert", ["a"], ONE_FAILED), ("after_alert", ["alert"], OK),
                                   ("tolerant", ["alert"], NONE_FAILED)))
    await rig.finish(run, "a")
    assert await rig.steps(run) == {"a": StepState.SUCCEEDED, "alert": StepState.SKIPPED,
                                    "after_alert": StepState.SKIPPED, "tolerant": StepState.RUNNING}
    await rig.finish(run, "tolerant")
    record = await rig.store.get_run(run)
    assert record is not None and record.state is RunState.SUCCEEDED


async def test_cancelling_a_pipeline_run_stops_its_running_steps_and_starts_nothing_downstream(rig: Rig) -> None:
    run = await rig.start(pipeline(("a", [], OK), ("b", [], OK), ("c", ["a", "b"], DONE)))
    await rig.finish(run, "a")
    await rig.master.jobs.cancel(run, "enough")
    await rig.settle()
    assert await rig.steps(run) == {"a": StepState.SUCCEEDED, "b": StepState.CANCELLED, "c": StepState.CANCELLED}
    record = await rig.store.get_run(run)
    assert record is not None and record.state is RunState.CANCELLED
    assert rig.ended.count((run, RunState.CANCELLED)) == 1


async def test_a_pause_cancels_a_scheduled_pipeline_run_fired_ahead_with_its_steps(clocked_stores: ClockedStores) -> None:
    """Fired well before its time (2 s here, as a burst's runs are; its first steps' tasks made then, to start at
    the pipeline's time), a pause before that time cancels the pipeline run and every step of it."""
    rig = await _rig(clocked_stores, MasterConfig(fire_ahead_s=2.0))
    spec = pipeline(("a", [], OK), ("b", ["a"], OK))
    spec.trigger.CopyFrom(pb.Trigger(every=pb.Trigger.Every(interval={"seconds": 10})))
    spec.trigger.start_at.FromMilliseconds(rig.now_ms() + 5_000)
    job = (await rig.master.jobs.submit(spec)).job
    async with rig.firing():
        rig.clock.advance(job.next_fire_ms / 1000 - rig.clock.now() - 1.5)  # fired; more than PAUSE_WITHDRAWS_MS ahead
        await settle(rig.store)
        (run,) = await rig.store.list_runs(job.id, 10)
        assert run.scheduled_ms == job.next_fire_ms and await rig.steps(run.id) == {
            "a": StepState.RUNNING, "b": StepState.PENDING}
        await rig.master.jobs.pause(job.id)
        await rig.settle()
        assert await rig.steps(run.id) == {"a": StepState.CANCELLED, "b": StepState.CANCELLED}
        record = await rig.store.get_run(run.id)
        assert record is not None and record.state is RunState.CANCELLED


async def test_two_runs_of_one_pipeline_move_their_steps_apart(rig: Rig) -> None:
    job = (await rig.master.jobs.submit(pipeline(("a", [], OK), ("b", ["a"], OK)))).job
    first = (await rig.master.jobs.trigger(job.id)).id
    rig.clock.advance(1)
    second = (await rig.master.jobs.trigger(job.id)).id
    assert first != second
    await rig.finish(first, "a")
    assert await rig.steps(first) == {"a": StepState.SUCCEEDED, "b": StepState.RUNNING}
    assert await rig.steps(second) == {"a": StepState.RUNNING, "b": StepState.PENDING}


@pytest.mark.parametrize(("steps", "error"), [
    ([("a", ["b"], OK), ("b", ["a"], OK)], "steps: a cycle: a → b → a"),
    ([("a", [], OK), ("b", ["x"], OK)], "steps[1].after: step 'b' comes after 'x', which is not a step"),
    ([("a", [], OK), ("a", [], OK)], "steps[1].name: 'a' is defined twice"),
    ([("a b", [], OK)], "steps[0].name: 'a b': use 1-64 of"),
    ([], "steps: a pipeline needs at least one step"),
])
def test_a_bad_graph_is_refused_naming_the_problem(steps: list[tuple[str, list[str], int]], error: str) -> None:
    with pytest.raises(SpecError) as caught:
        normalize_pipeline(pipeline(*steps))
    assert str(caught.value).startswith(error)


async def test_the_master_refuses_a_bad_pipeline_before_storing_anything(rig: Rig) -> None:
    with pytest.raises(InvalidArgument, match="a cycle"):
        await rig.master.jobs.submit(pipeline(("a", ["b"], OK), ("b", ["a"], OK)))
    assert await rig.store.list_jobs(100, None, "") == []


async def test_a_backfill_makes_one_pipeline_run_per_past_date_and_delete_takes_the_step_jobs(rig: Rig) -> None:
    spec = pipeline(("a", [], OK), ("b", ["a"], OK))
    spec.trigger.Clear()
    spec.trigger.cron.expr = "0 3 * * *"
    job = (await rig.master.jobs.submit(spec)).job
    day = 86_400_000
    start = (rig.now_ms() // day - 3) * day
    await rig.master.backfiller.plan(job, start, start + 2 * day, max_concurrent=5)
    await rig.settle()
    runs = await rig.store.list_runs(job.id, 10)
    assert sorted(r.scheduled_ms for r in runs) == [start + 3 * 3_600_000, start + day + 3 * 3_600_000]
    for run in runs:
        assert await rig.steps(run.id) == {"a": StepState.RUNNING, "b": StepState.PENDING}
    for run in runs:
        await rig.master.jobs.cancel(run.id)
    await rig.settle()
    step_jobs = [s.job_id for s in (await rig.store.get_job(job.id)).spec.steps]
    await rig.master.jobs.delete(job.id)
    for step_job in step_jobs:
        assert await rig.store.get_job(step_job) is None


async def test_a_step_reads_its_upstream_results_and_a_step_that_skips_itself_is_skipped(rig: Rig) -> None:
    run = await rig.start(pipeline(("extract", [], OK), ("check", ["extract"], OK), ("load", ["check"], OK),
                                   ("audit", ["check"], NONE_FAILED), ("report", ["extract", "check", "audit"], DONE)))
    first = await rig.finish(run, "extract", result='{"rows":5}')
    assert first.upstream_json == ""
    check = await rig.finish(run, "check", result='{"$skip":"no new data"}')
    assert check.upstream_json == '{"extract":{"rows":5}}'
    assert await rig.steps(run) == {"extract": StepState.SUCCEEDED, "check": StepState.SKIPPED,
                                    "load": StepState.SKIPPED, "audit": StepState.RUNNING, "report": StepState.PENDING}
    await rig.finish(run, "audit", result="[1,2]")
    report = await rig.finish(run, "report")
    assert report.upstream_json == '{"extract":{"rows":5},"check":{"$skip":"no new data"},"audit":[1,2]}'
    record = await rig.store.get_run(run)
    assert record is not None and record.state is RunState.SUCCEEDED


async def test_a_rerun_of_failed_steps_keeps_what_succeeded_and_runs_the_rest_for_the_same_date(rig: Rig) -> None:
    run = await rig.start(pipeline(("a", [], OK), ("b", ["a"], OK), ("c", ["b"], OK), ("side", ["a"], OK)))
    await rig.finish(run, "a", result="7")
    await rig.finish(run, "side")
    await rig.finish(run, "b", "FAILED")
    original = await rig.store.get_run(run)
    assert original is not None and original.state is RunState.FAILED
    rig.clock.advance(1)
    again = await rig.master.jobs.rerun(run, failed_only=True)
    assert again.rerun_of == run and again.scheduled_ms == original.scheduled_ms
    assert await rig.steps(again.id) == {"a": StepState.SUCCEEDED, "b": StepState.RUNNING, "c": StepState.PENDING,
                                         "side": StepState.SUCCEEDED}
    kept = {s.name: s.run_id for s in original.steps}
    assert {s.name: s.run_id for s in again.steps if s.name in ("a", "side")} == {"a": kept["a"], "side": kept["side"]}
    b = await rig.finish(again.id, "b")
    assert b.upstream_json == '{"a":7}'  # read from the kept run
    await rig.finish(again.id, "c")
    record = await rig.store.get_run(again.id)
    assert record is not None and record.state is RunState.SUCCEEDED
    with pytest.raises(FailedPrecondition, match="no failed, skipped or cancelled step"):
        await rig.master.jobs.rerun(again.id, failed_only=True)


async def test_retention_deletes_a_pipeline_run_with_its_steps_and_looks_for_no_tasks_it_never_had(
        rig: Rig) -> None:
    """A pipeline run's task_count counts its steps; it has no tasks of its own. Retention deletes the run and
    its run:{run}:steps, at once, its task_count never rewritten as if tasks had gone (it used to look for
    task_count nonexistent tasks, spending its budget on them and leaving a run with a wrong step count)."""
    job = (await rig.master.jobs.submit(pipeline(("a", [], OK), ("b", [], OK), ("c", [], OK), ("d", [], OK)))).job
    runs = []
    for _ in range(2):
        rig.clock.advance(60)
        run = (await rig.master.jobs.trigger(job.id)).id
        for step in "abcd":
            await rig.finish(run, step)
        runs.append(run)
    old, kept = runs
    keys = rig.store.keys
    bounds = RetentionBounds(keep_runs=0, max_age_ms=10**12, jobs_per_step=100, budget=4)
    cursor, counts = 0, set()
    for _ in range(100):
        count = await rig.store.redis.hget(keys.run(old), "task_count")
        if count is None:
            break
        counts.add(count)
        cursor = (await rig.store.purge_history(cursor, bounds)).cursor
    assert counts == {"4"}
    assert not await rig.store.redis.exists(keys.run(old), keys.run_steps(old), keys.running_pipelines)
    record = await rig.store.get_run(kept)  # the job's last run stays, with its steps
    assert record is not None and [s.state for s in record.steps] == [StepState.SUCCEEDED] * 4


async def test_the_script_that_ends_a_step_s_run_returns_the_pipeline_run_s_end_with_it(rig: Rig) -> None:
    """The end of a pipeline run comes back in the reply of the script that caused it (report, reap,
    cancel): the master publishes it with the step run's end, in the same call, reading nothing more."""
    run = await rig.start(pipeline(("a", [], OK), ("b", ["a"], OK)))
    await rig.finish(run, "a")
    record = await rig.store.get_run(run)
    assert record is not None
    (b,) = [s for s in record.steps if s.name == "b"]
    (claim,) = await rig.store.claim("default", [(ids.task_id(b.run_id, 0), "w1")], lease_ms=60_000,
                                     timeout_grace_ms=0)
    rig.clock.advance(2)
    (verdict,) = await rig.store.report([Report(claim.task_id, claim.token, "SUCCEEDED")])
    ended = await rig.store.get_run(run)
    assert ended is not None and ended.state is RunState.SUCCEEDED
    assert verdict.pipeline == PipelineEnd(run, RunState.SUCCEEDED, ended.finished_ms - ended.fired_ms)
    rig.outcomes.apply_verdicts([verdict])  # no background work, no read: both ends at once, the step's first
    assert [e for e in rig.ended if e[0] in (b.run_id, run)] == [(b.run_id, RunState.SUCCEEDED),
                                                                 (run, RunState.SUCCEEDED)]
    assert rig.master.metrics.pipeline_runs.labels("SUCCEEDED")._value.get() == 1

    lost = await rig.start(pipeline(("only", [], OK), name="lost"))
    (step,) = (await rig.store.get_run(lost)).steps
    await rig.store.claim("default", [(ids.task_id(step.run_id, 0), "w1")], lease_ms=1_000, timeout_grace_ms=0)
    rig.clock.advance(5)
    (reaped,) = await rig.store.reap_expired(max_lost=0)
    assert reaped.run_state is RunState.FAILED and reaped.pipeline is not None
    assert (reaped.pipeline.run_id, reaped.pipeline.state) == (lost, RunState.FAILED)

    cancelled = await rig.start(pipeline(("x", [], OK), ("y", ["x"], OK), name="cancelled"))
    (x, _) = (await rig.store.get_run(cancelled)).steps
    result = await rig.store.cancel("enough", run_ids=[cancelled], task_ids=[ids.task_id(x.run_id, 0)])
    (ended_run,) = result.ended_runs
    assert ended_run.run_id == x.run_id and ended_run.pipeline is not None
    assert (ended_run.pipeline.run_id, ended_run.pipeline.state) == (cancelled, RunState.CANCELLED)
    # A later reply about an ended run does not tell its pipeline run's end again.
    (again,) = await rig.store.report([Report(claim.task_id, claim.token, "SUCCEEDED")])
    assert again.run_state is None and again.pipeline is None


async def test_running_pipeline_runs_are_counted_from_redis_whichever_master_reads_them(rig: Rig) -> None:
    """The gauge of running pipeline runs comes from the index the scripts keep, not from a master's
    memory: a master that has not made or ended any of them (a new leader) scrapes the same figure."""
    first = await rig.start(pipeline(("a", [], OK), ("b", ["a"], OK)))
    rig.clock.advance(1)
    second = (await rig.master.jobs.trigger(first.split(".")[0])).id
    other = Rig(rig.clock, rig.store)  # another master on the same Redis, with metrics of its own

    async def scraped(r: Rig) -> str:
        text = (await r.master.metrics.render([], True, 1, r.store.queue_depths, r.store.ping,
                                              r.store.running_pipeline_runs)).decode()
        (line,) = [line for line in text.splitlines() if line.startswith("sparkyard_pipeline_runs_running ")]
        return line.split()[1]

    assert await scraped(rig) == await scraped(other) == "2.0"
    await rig.finish(first, "a")
    await rig.finish(first, "b")
    assert await scraped(other) == "1.0"
    await other.master.jobs.cancel(second, "enough")
    await other.settle()
    assert await scraped(rig) == "0.0"
    assert not await rig.store.redis.exists(rig.store.keys.running_pipelines)
