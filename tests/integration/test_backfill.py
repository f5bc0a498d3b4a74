"""Backfill with real processes: a cron job's past fire times run, each once, with its scheduled time in its
context, never more at once than asked; bad requests name what is wrong."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from itertools import combinations

import pytest
import redis

from harness import EXAMPLES, Cluster, wait_for
from sparkyard import errors
from sparkyard.keys import Keys
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"


def _hour(dt: datetime) -> datetime:
    return dt.replace(minute=0, second=0, microsecond=0)


def test_backfill_runs_each_past_fire_time_once_at_most_n_at_once(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    job = client.submit(f"{TASKS}:scheduled_at", cron="0 * * * *", args=["1"])
    last = _hour(datetime.now(timezone.utc)) - timedelta(hours=1)
    first = last - timedelta(hours=4)
    plan = client.backfill(job.id, first, last, max_concurrent=2)
    assert (plan.planned, plan.added) == (5, 5)
    wanted = [first + timedelta(hours=i) for i in range(5)]

    def ended() -> list[pb.Run]:
        runs = client.runs(job.id, limit=100, with_tasks=True)
        done = [r for r in runs if r.state in (pb.RUN_SUCCEEDED, pb.RUN_FAILED, pb.RUN_CANCELLED)]
        return runs if len(done) == 5 else []

    runs = wait_for(ended, 180, "the 5 backfilled runs to end")
    assert sorted(r.scheduled_at.ToDatetime(timezone.utc) for r in runs) == wanted
    assert all(r.state == pb.RUN_SUCCEEDED for r in runs)
    # Each task saw its own run's scheduled time.
    assert sorted(json.loads(r.result_json)[0] for r in runs) == [w.isoformat() for w in wanted]
    spans = [(a.started_at.ToMilliseconds(), a.finished_at.ToMilliseconds())
             for r in runs for t in r.tasks for a in t.attempts]
    assert len(spans) == 5
    # No instant at which three ran together: of any three, some two did not overlap.
    overlaps = {(i, j) for (i, a), (j, b) in combinations(enumerate(spans), 2) if a[0] < b[1] and b[0] < a[1]}
    assert not any({(i, j), (i, k), (j, k)} <= overlaps for i, j, k in combinations(range(5), 3)), spans

    again = client.backfill(job.id, first.isoformat(), last.isoformat())  # the same range: nothing runs twice
    assert (again.planned, again.added) == (5, 5)
    plans = redis.Redis.from_url(shared_cluster.redis_url, decode_responses=True)
    wait_for(lambda: plans.hget(Keys(shared_cluster.namespace).backfills, job.id) is None, 60,
             "the leader to find the re-planned times' runs and take them out of the plan")
    assert len(client.runs(job.id, limit=100)) == 5
    client.cancel(job.id)


def test_backfill_refuses_what_it_cannot_do_naming_why(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    cron = client.submit(f"{TASKS}:noop", cron="0 * * * *")
    one_shot = client.submit(f"{TASKS}:noop", delay="1h")
    now = datetime.now(timezone.utc)
    with pytest.raises(errors.InvalidArgument, match="end: a backfill is for past fire times"):
        client.backfill(cron.id, now - timedelta(hours=2), now + timedelta(hours=2))
    with pytest.raises(errors.InvalidArgument, match="end: the range ends before it starts"):
        client.backfill(cron.id, now - timedelta(hours=1), now - timedelta(hours=2))
    with pytest.raises(errors.InvalidArgument, match="more than 10000 fire times"):
        client.backfill(cron.id, now - timedelta(days=500), now - timedelta(hours=1))
    with pytest.raises(errors.InvalidArgument, match="max_concurrent"):
        client.backfill(cron.id, now - timedelta(hours=2), now - timedelta(hours=1), max_concurrent=-1)
    with pytest.raises(errors.InvalidArgument, match="start: 'yesterday' is not an ISO 8601 time"):
        client.backfill(cron.id, "yesterday", now)
    with pytest.raises(errors.FailedPrecondition, match="one-shot job"):
        client.backfill(one_shot.id, now - timedelta(hours=2), now - timedelta(hours=1))
    with pytest.raises(errors.NotFound):
        client.backfill("j19a8c2f3a1b2c3d4e5f65", now - timedelta(hours=2), now - timedelta(hours=1))
    client.cancel(cron.id)
    with pytest.raises(errors.FailedPrecondition, match="CANCELLED"):
        client.backfill(cron.id, now - timedelta(hours=2), now - timedelta(hours=1))
    client.cancel(one_shot.id)
