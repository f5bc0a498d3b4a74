"""The core path with real processes: submit → Redis → slot dispatch over gRPC → Spark → fenced result.

These tests share one master and two session-runner workers (``shared_cluster``) and never break them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import EXAMPLES, Cluster, wait_for
from sparkyard import FailedPrecondition, InvalidArgument, NotFound
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"


def entry(name: str) -> str:
    return f"{TASKS}:{name}"


def test_session_task_reaches_succeeded_with_its_result_and_attempt_record(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    job = client.submit(entry("count"), args=["42"])
    run, timed_out = client.wait(first_run_id(job), timeout=120)
    assert not timed_out
    assert run.state == pb.RUN_SUCCEEDED
    (task,) = run.tasks
    assert task.state == pb.TASK_SUCCEEDED
    result = json.loads(task.result_json)
    assert result["count"] == 42 and result["attempt"] == 1
    (attempt,) = task.attempts
    assert attempt.state == pb.ATTEMPT_SUCCEEDED
    assert attempt.worker in ("w1", "w2") and attempt.worker == result["worker"]
    assert attempt.fencing_token == result["token"] > 0
    assert attempt.started_at.ToMilliseconds() >= run.fired_at.ToMilliseconds() - 1000
    assert attempt.finished_at.ToMilliseconds() >= attempt.started_at.ToMilliseconds()
    assert run.scheduled_at.ToMilliseconds() <= run.fired_at.ToMilliseconds()
    log = b"".join(client.logs(task.id)).decode()
    assert f"counted 42 in task {task.id}" in log and "count done" in log


def test_an_attempt_has_spark_s_own_sql_defaults_not_the_warm_driver_s(shared_cluster: Cluster, tmp_path: Path) -> None:
    """The driver runs with spark.sql.shuffle.partitions=8 for its own warm-up; a program reads Spark's 200
    (as under spark-submit), or the job's conf."""
    client = shared_cluster.client()
    program = tmp_path / "partitions.py"
    program.write_text("def main(spark, ctx):\n    return spark.conf.get('spark.sql.shuffle.partitions')\n")
    for conf, seen in (({}, "200"), ({"spark.sql.shuffle.partitions": "5"}, "5")):
        run, timed_out = client.wait(first_run_id(client.submit(f"{program}:main", conf=conf)), timeout=120)
        assert not timed_out and run.state == pb.RUN_SUCCEEDED, run.tasks[0].attempts[-1].error
        assert json.loads(run.tasks[0].result_json) == seen


@pytest.mark.spark
def test_submit_runner_task_runs_as_its_own_spark_application(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    job = client.submit(entry("count"), args=["7"], runner="submit", conf=["spark.sql.shuffle.partitions=3"])
    run, timed_out = client.wait(first_run_id(job), timeout=180)
    assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
    assert json.loads(run.tasks[0].result_json)["count"] == 7
    log = b"".join(client.logs(run.tasks[0].id)).decode()
    assert "spark-submit" in log and "spark.sql.shuffle.partitions=3" in log


def test_failed_attempt_is_retried_after_backoff_and_then_succeeds(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    job = client.submit(entry("fail_first"), args=["3"], retries=3, backoff="200ms")
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED
    attempts = run.tasks[0].attempts
    assert [a.state for a in attempts] == [pb.ATTEMPT_FAILED, pb.ATTEMPT_FAILED, pb.ATTEMPT_SUCCEEDED]
    assert "planned failure on attempt 1" in attempts[0].error
    assert "RuntimeError" in attempts[0].traceback
    tokens = [a.fencing_token for a in attempts]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    # The second attempt was leased no earlier than the backoff after the first one finished.
    assert attempts[1].leased_at.ToMilliseconds() - attempts[0].finished_at.ToMilliseconds() >= 150


def test_exhausted_retries_leave_the_task_dead_and_the_run_failed(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    job = client.submit(entry("always_fail"), retries=1, backoff="100ms")
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_FAILED
    task = run.tasks[0]
    assert task.state == pb.TASK_DEAD
    assert [a.state for a in task.attempts] == [pb.ATTEMPT_FAILED, pb.ATTEMPT_FAILED]
    assert "this task always fails" in task.error
    assert run.tasks_failed == 1


def test_attempt_past_its_timeout_is_killed_and_recorded_as_timed_out(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    job = client.submit(entry("sleep_python"), args=["60"], timeout="2s")
    run, _ = client.wait(first_run_id(job), timeout=60)
    assert run.state == pb.RUN_FAILED
    (attempt,) = run.tasks[0].attempts
    assert attempt.state == pb.ATTEMPT_TIMED_OUT
    assert "timed out after 2s" in attempt.error
    took = attempt.finished_at.ToMilliseconds() - attempt.started_at.ToMilliseconds()
    assert 1_900 <= took < 20_000


def test_cancel_of_a_running_task_kills_it_and_frees_its_slot(shared_cluster: Cluster, tmp_path: Path) -> None:
    client = shared_cluster.client()
    markers = tmp_path / "markers"
    job = client.submit(entry("sleep_in_spark"), args=["120", str(markers)])
    run_id = first_run_id(job)
    wait_for(lambda: list(markers.glob("*.started")), 60, "the task to start inside Spark")
    cancelled = client.cancel(run_id, "test cancel")
    assert run_id in cancelled
    run, timed_out = client.wait(run_id, timeout=30)
    assert not timed_out and run.state == pb.RUN_CANCELLED
    assert run.reason == "test cancel"
    assert run.tasks[0].attempts[-1].state == pb.ATTEMPT_CANCELLED
    wait_for(lambda: sum(w.free_slots for w in client.workers()) == 4, 30, "every slot to be free again")
    with pytest.raises(FailedPrecondition, match="already CANCELLED"):
        client.cancel(run_id)


def test_twenty_jobs_spread_over_both_workers(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    jobs = [client.submit(entry("count"), args=["5"]) for _ in range(20)]
    runs = [client.wait(first_run_id(j), timeout=180)[0] for j in jobs]
    assert all(r.state == pb.RUN_SUCCEEDED for r in runs)
    workers = {r.tasks[0].attempts[-1].worker for r in runs}
    assert workers == {"w1", "w2"}


def test_cancel_of_a_finished_job_says_there_is_nothing_to_cancel(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    job = client.submit(entry("noop"))
    client.wait(first_run_id(job), timeout=60)
    with pytest.raises(FailedPrecondition, match="is COMPLETED and has no active run"):
        client.cancel(job.id)


def test_idempotency_key_returns_the_same_job(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    first = client.submit(entry("noop"), idempotency_key="same-key-1", delay="1h")
    second = client.submit(entry("noop"), idempotency_key="same-key-1", delay="1h")
    assert first.id == second.id
    client.cancel(first.id)


def test_a_bulk_submit_with_keys_sent_again_returns_its_jobs_instead_of_making_them_twice(
        shared_cluster: Cluster) -> None:
    from sparkyard.options import build_spec

    client = shared_cluster.client()
    specs = [build_spec(entry("noop"), name=f"bulk-keyed-{i}", delay="1h") for i in range(3)]
    keys = [f"bulk-keyed-{i}" for i in range(3)]
    first = client.submit_many(specs, idempotency_keys=keys)
    again = client.submit_many(specs, idempotency_keys=keys)
    assert [j.id for j in again] == [j.id for j in first] and len({j.id for j in first}) == 3
    unkeyed = client.submit_many(specs[:1])
    assert unkeyed[0].id not in {j.id for j in first}
    with pytest.raises(InvalidArgument, match="idempotency_keys: 2 keys for 3 jobs"):
        client.submit_many(specs, idempotency_keys=keys[:2])
    for job in (*first, *unkeyed):
        client.cancel(job.id)


def test_many_waiters_on_one_run_all_wake(shared_cluster: Cluster) -> None:
    from concurrent.futures import ThreadPoolExecutor

    client = shared_cluster.client()
    job = client.submit(entry("sleep_python"), args=["1.5"])
    run_id = first_run_id(job)
    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(lambda _: client.wait(run_id, timeout=60), range(12)))
    assert all(run.state == pb.RUN_SUCCEEDED and not timed_out for run, timed_out in results)


def test_wait_times_out_on_a_run_that_does_not_end(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    job = client.submit(entry("noop"), delay="1h")
    run, timed_out = client.wait(first_run_id(job), timeout=0.5)
    assert timed_out
    client.cancel(job.id)


def test_unknown_ids_are_not_found_and_malformed_ids_invalid(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    with pytest.raises(NotFound, match="job j000000000000000000000 not found"):
        client.job("j000000000000000000000")
    with pytest.raises(NotFound, match="not found"):
        client.run("j000000000000000000000.1732262400000")
    with pytest.raises(InvalidArgument, match="not a job, run or task id"):
        client.cancel("nonsense")


def test_server_rejects_a_bad_spec_naming_the_field(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    spec = pb.JobSpec(entrypoint=f"{TASKS}:count", priority=5000)
    with pytest.raises(InvalidArgument, match="priority"):
        client.submit_spec(spec)
    spec = pb.JobSpec(entrypoint="relative/path.py:main")
    with pytest.raises(InvalidArgument, match="absolute path"):
        client.submit_spec(spec)
    spec = pb.JobSpec(entrypoint=f"{TASKS}:count")
    spec.trigger.cron.expr = "61 * * * *"
    with pytest.raises(InvalidArgument, match="trigger.cron.expr"):
        client.submit_spec(spec)


def cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", cluster.address, *args],
                          capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("args, message", [
    (["submit", "no/such/file.py:main"], "file not found: no/such/file.py"),
    (["submit", f"{TASKS}:nope"], "has no top-level function 'nope'"),
    (["submit", f"{TASKS}:count", "--cron", "* * *"], "sparkyard submit: --cron: "),
    (["submit", f"{TASKS}:count", "--timeout", "5x"], "sparkyard submit: --timeout: '5x' is not a duration"),
    (["submit", f"{TASKS}:count", "--conf", "novalue"], "is not key=value"),
    (["job", "j000000000000000000000"], "not found"),
    (["submit", f"{TASKS}:count", "--cron", "61 * * * *"],
     "sparkyard submit: --cron: '61 * * * *' is not a valid cron expression: its minute field '61' is not valid"),
    (["submit", f"{TASKS}:count", "--at", "2020-01-01T00:00:00Z"], "at: 2020-01-01T00:00:00.000Z is in the past"),
    (["submit", f"{TASKS}:count", "--bogus"], "sparkyard submit: unrecognized arguments: --bogus"),
    (["runs", "no-job-is-named-this"], "sparkyard runs: job_id: 'no-job-is-named-this' is neither a job id nor"),
])
def test_cli_bad_input_prints_one_line_and_fails(shared_cluster: Cluster, args: list[str], message: str) -> None:
    done = cli(shared_cluster, *args)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_a_submit_to_a_group_no_worker_serves_says_so_in_one_line(shared_cluster: Cluster) -> None:
    served = cli(shared_cluster, "submit", f"{TASKS}:count", "--cron", "0 3 * * *")
    assert served.returncode == 0 and served.stderr == "", served.stderr
    unserved = cli(shared_cluster, "submit", f"{TASKS}:count", "--group", "gpu", "--cron", "0 3 * * *")
    assert unserved.returncode == 0, unserved.stderr
    assert unserved.stderr.splitlines() == [
        "sparkyard: note: no worker serves group 'gpu' now (workers connected serve 'default'); the job's runs "
        "wait until one does"], unserved.stderr
    client = shared_cluster.client()
    for done in (served, unserved):
        client.delete(done.stdout.split()[2])


def test_a_one_shot_job_whose_run_failed_reads_failed_in_the_cli_as_on_the_console(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    failed = client.submit(f"{TASKS}:always_fail", name="cli-fails", retries=0)
    run, _ = client.wait(first_run_id(failed), timeout=120)
    assert run.state == pb.RUN_FAILED
    job = client.job(failed.id)
    assert (job.state, job.last_run_state) == (pb.JOB_COMPLETED, pb.RUN_FAILED)
    table = cli(shared_cluster, "job", failed.id)
    assert table.returncode == 0 and "FAILED" in table.stdout and "COMPLETED" not in table.stdout, table.stdout
    listed = cli(shared_cluster, "jobs", "--state", "failed", "--json")
    assert failed.id in [j["id"] for j in json.loads(listed.stdout)], listed.stdout
    client.delete(failed.id)


def test_cli_without_a_reachable_master_says_so() -> None:
    done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", "127.0.0.1:1", "jobs"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 69  # not 1: a script tells "no master" from "the run failed"
    assert "no master listening at 127.0.0.1:1 (connection refused)" in done.stderr
    assert "--tls-ca" not in done.stderr  # a refused connection is not a TLS problem
    assert len(done.stderr.strip().splitlines()) == 1


def test_cli_json_output_of_runs_shows_attempts_with_rfc3339_times(shared_cluster: Cluster) -> None:
    done = cli(shared_cluster, "submit", f"{TASKS}:count", "--wait", "--json")
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["state"] == "SUCCEEDED"
    attempt = run["tasks"][0]["attempts"][0]
    assert set(attempt) >= {"worker", "fencing_token", "started_at", "finished_at", "state", "result", "error"}
    assert attempt["started_at"].endswith("Z") and len(attempt["started_at"]) == len("2026-11-22T03:00:00.000Z")
    runs = json.loads(cli(shared_cluster, "runs", run["job_id"], "--json").stdout)
    assert runs[0]["id"] == run["id"] and runs[0]["tasks"][0]["attempts"][0]["result"]["count"] == 10
    workers = json.loads(cli(shared_cluster, "workers", "--json").stdout)
    assert {w["id"] for w in workers} >= {"w1", "w2"}
    assert all("slots" in w and "free_slots" in w for w in workers)
