"""Pipelines end to end: a definition file applied with the CLI (dry run, create, nothing twice, update,
prune), runs through real masters, workers and Spark with fan-out, fan-in and trigger rules, the run's
logical date in a step's args, and every step's state in `sparkyard run --json`."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from harness import EXAMPLES, Cluster
from sparkyard.cli.main import main as cli_main
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"
WAIT_S = 180

DEFINITION = '''
from sparkyard import Pipeline

p = Pipeline("it-etl", cron="0 3 * * *")
extract = p.step("extract", "{tasks}:count", args=["5"])
fan = p.step("fan", "{tasks}:noop", after=[extract], inputs=["a", "b", "c"])
dated = p.step("dated", "{tasks}:echo_args", after=[extract], args=["--date", "{{ds}}"])
p.step("join", "{tasks}:upstream_echo", after=[fan, dated])
maybe = p.step("maybe", "{tasks}:skip_step", after=[extract])
p.step("after_maybe", "{tasks}:noop", after=[maybe])
{extra}
'''
FAILING = '''
broken = p.step("broken", "{tasks}:always_fail", after=[extract])
p.step("after_broken", "{tasks}:noop", after=[broken])
p.step("alert", "{tasks}:noop", after=[broken], trigger_rule="one_failed")
'''


def write(path: Path, extra: str = "") -> Path:
    path.write_text(DEFINITION.format(tasks=TASKS, extra=extra.format(tasks=TASKS)))
    return path


def cli(capsys: pytest.CaptureFixture[str], cluster: Cluster, *args: str) -> tuple[int, str]:
    code = cli_main([*args, "--master", cluster.address])
    captured = capsys.readouterr()
    assert code == 0 or captured.err, "a failure says why"
    return code, captured.out + captured.err


def test_apply_run_update_and_prune_a_pipeline(shared_cluster: Cluster, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    client = shared_cluster.client()
    definition = write(tmp_path / "pipelines.py", FAILING)

    code, out = cli(capsys, shared_cluster, "apply", str(definition), "--dry-run")
    assert (code, out.strip()) == (0, "+ create pipeline it-etl: 9 steps [dry run]")
    assert not [j for j in client.jobs(limit=1000) if j.spec.name == "it-etl"]
    code, out = cli(capsys, shared_cluster, "apply", str(definition), "--json")
    (created,) = json.loads(out)
    assert code == 0 and created["action"] == "create"
    pipeline_id = created["job_id"]
    code, out = cli(capsys, shared_cluster, "apply", str(definition))
    assert (code, out.strip()) == (0, f"= unchanged pipeline it-etl ({pipeline_id})")
    code, out = cli(capsys, shared_cluster, "job", pipeline_id)
    assert code == 0 and "(pipeline, 9 steps)" in out and "one_failed" in out and "fan, dated" in out
    # Its step jobs are not listed as jobs of their own; `jobs --pipelines` lists pipelines alone.
    assert [j.spec.name for j in client.jobs(limit=1000) if j.spec.name.startswith("it-etl")] == ["it-etl"]
    code, out = cli(capsys, shared_cluster, "jobs", "--pipelines", "--json")
    listed = json.loads(out)
    assert code == 0 and pipeline_id in [j["id"] for j in listed] and all(j["spec"]["steps"] for j in listed)

    first = client.trigger(pipeline_id)
    run, timed_out = client.wait(first.id, timeout=WAIT_S)
    assert not timed_out and run.state == pb.RUN_FAILED
    code, out = cli(capsys, shared_cluster, "run", first.id, "--json")
    shown = json.loads(out)
    states = {s["name"]: s["state"] for s in shown["steps"]}
    assert states == {"extract": "SUCCEEDED", "fan": "SUCCEEDED", "dated": "SUCCEEDED", "join": "SUCCEEDED",
                      "maybe": "SKIPPED", "after_maybe": "SKIPPED", "broken": "FAILED",
                      "after_broken": "UPSTREAM_FAILED", "alert": "SUCCEEDED"}
    steps = {s.name: s for s in run.steps}
    assert steps["join"].started_at.ToMilliseconds() >= max(steps["fan"].finished_at.ToMilliseconds(),
                                                             steps["dated"].finished_at.ToMilliseconds())
    fan = client.run(steps["fan"].run_id)
    assert fan.task_count == 3 and fan.pipeline_run == first.id
    ds = datetime.fromtimestamp(run.scheduled_at.ToMilliseconds() / 1000, timezone.utc).strftime("%Y-%m-%d")
    assert json.loads(client.run(steps["dated"].run_id).tasks[0].result_json) == ["--date", ds]
    # A step reads its upstream steps' results: a one-task step's result, a split step's list of them.
    assert json.loads(client.run(steps["join"].run_id).tasks[0].result_json) == {"fan": [0, 1, 2],
                                                                                 "dated": ["--date", ds]}
    assert not steps["after_broken"].run_id  # it never ran

    # A new version without the failing branch: effective from the next run; the ended run keeps its steps.
    write(definition)
    code, out = cli(capsys, shared_cluster, "apply", str(definition))
    assert (code, out.strip()) == (0, f"~ update pipeline it-etl ({pipeline_id}): steps"), out
    second = client.trigger(pipeline_id)
    run, timed_out = client.wait(second.id, timeout=WAIT_S)
    assert not timed_out and run.state == pb.RUN_SUCCEEDED
    assert [s.name for s in run.steps] == ["extract", "fan", "dated", "join", "maybe", "after_maybe"]
    assert len(client.run(first.id).steps) == 9

    # --prune deletes what no file defines any more.
    other = tmp_path / "other.py"
    other.write_text("from sparkyard import Pipeline\n\nkeep = Pipeline('it-other')\n"
                     f"keep.step('only', '{TASKS}:noop')\n")
    code, out = cli(capsys, shared_cluster, "apply", str(other), "--prune", "--dry-run")
    assert code == 0 and f"- delete pipeline it-etl ({pipeline_id}): no file defines it [dry run]" in out
    code, out = cli(capsys, shared_cluster, "apply", str(other), "--prune")
    assert code == 0 and f"- delete pipeline it-etl ({pipeline_id})" in out
    assert [j.spec.name for j in client.jobs(limit=1000) if j.spec.name.startswith("it-")] == ["it-other"]


def test_a_bad_definition_is_one_line_naming_the_problem(shared_cluster: Cluster, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from sparkyard import Pipeline\n\np = Pipeline('it-bad')\n"
                   f"a = p.step('a', '{TASKS}:noop', after=['b'])\n")
    code = cli_main(["apply", str(bad), "--master", shared_cluster.address])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [
        f"sparkyard apply: {bad}: pipeline 'it-bad': steps[0].after: step 'a' comes after 'b', which "
        "is not a step of the pipeline"]
