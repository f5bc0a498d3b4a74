"""/metrics of the master (``--http``) and of workers (``--metrics``), scraped as Prometheus would while
real runs go through the shared cluster: the figures must move with what happened."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from harness import EXAMPLES, Cluster
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(address: str) -> Samples:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_master_and_worker_metrics_count_what_the_runs_did(shared_cluster: Cluster) -> None:
    http = shared_cluster.http
    client = shared_cluster.client()
    before = scrape(http["master"])
    workers_before = [scrape(http[w]) for w in ("w1", "w2")]

    ok, _ = client.wait(first_run_id(client.submit(f"{TASKS}:noop", inputs=["a", "b", "c"])), timeout=120)
    failed, _ = client.wait(first_run_id(client.submit(f"{TASKS}:always_fail")), timeout=120)
    assert ok.state == pb.RUN_SUCCEEDED and failed.state == pb.RUN_FAILED

    after = scrape(http["master"])

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("sparkyard_attempts_total", outcome="SUCCEEDED") >= 3
    assert grew("sparkyard_attempts_total", outcome="FAILED") >= 1
    assert grew("sparkyard_tasks_total", state="SUCCEEDED") >= 3
    assert grew("sparkyard_tasks_total", state="DEAD") >= 1
    assert grew("sparkyard_runs_total", state="SUCCEEDED") >= 1 and grew("sparkyard_runs_total", state="FAILED") >= 1
    assert grew("sparkyard_firings_total", status="created") >= 2
    assert grew("sparkyard_trigger_lateness_seconds_count") >= 2
    assert grew("sparkyard_task_duration_seconds_count", outcome="SUCCEEDED") >= 3
    assert grew("sparkyard_redis_call_seconds_count", script="claim") >= 1
    assert value(after, "sparkyard_leader") == 1 and value(after, "sparkyard_leader_epoch") >= 1
    assert value(after, "sparkyard_cluster_workers_connected") == 2
    for w in ("w1", "w2"):
        assert value(after, "sparkyard_cluster_worker_slots", worker=w, group="default") == 2
    assert ("sparkyard_queue_depth", (("group", "default"),)) in after
    # Tasks for a group no worker serves wait in its queue: counted by their priority.
    waiting = client.submit(f"{TASKS}:noop", group="nobody", priority=3, inputs=["a", "b"])
    queued = scrape(http["master"])
    client.cancel(waiting.id)
    assert value(queued, "sparkyard_queue_depth", group="nobody") == 2
    assert value(queued, "sparkyard_queue_depth_by_priority", group="nobody", priority="3") == 2
    assert 0 <= value(after, "sparkyard_redis_ping_seconds") < 30

    workers_after = [scrape(http[w]) for w in ("w1", "w2")]
    ran = sum(value(a, "sparkyard_worker_attempts_total", outcome="SUCCEEDED")
              - value(b, "sparkyard_worker_attempts_total", outcome="SUCCEEDED")
              for a, b in zip(workers_after, workers_before))
    assert ran >= 3
    for samples in workers_after:
        assert value(samples, "sparkyard_worker_slots") == 2
        assert value(samples, "sparkyard_worker_connected") == 1
        assert value(samples, "sparkyard_worker_connections") >= 1
