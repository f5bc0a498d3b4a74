"""Scale: a million schedules on one master and one Redis; bursts of jobs due in the same second.

    .venv/bin/python tests/bench/bench_scale.py [--daily 990000] [--every-minute 10000] [--minutes 3]
        [--keep-runs 3] [--bursts 10000,100000] [--burst-shape at|cron] [--leader-lease 0] [--list-repeats 100]
        [--submit-threads 4] [--burst-workers-max 20]

Part 1 (issue 23 item 4) — a fresh Redis, a leader and a standby master (default configuration but
``--keep-runs``), two protocol-level workers (tests/bench/protocol_worker.py: they speak the worker protocol
and finish every task at once, so the master and Redis are measured, not Spark). Submitted through the
public API's bulk submit (``Client.submit_many``, 1,000 jobs a call made by ``build_specs``, from
``--submit-threads`` client threads): ``--daily`` jobs with a daily cron schedule, their fire times spread
over the day's seconds (6-field cron, time zone Europe/Berlin), and ``--every-minute`` jobs firing every
minute, spread over the minute's seconds. Each job has its own name. Then, in order:

* submit time; Redis ``used_memory`` per job (measured over the daily jobs, before the every-minute jobs
  start making runs), right after the submit and once the submit's idempotency keys have expired (a day
  later: the bench deletes them, as their expiry would); the leader's RSS;
* ``--minutes`` minutes of firing: lateness of every every-minute run, scheduled time → attempt started
  (the worker's report), p50/p99/max, and its three stages (scheduled → fired, fired → leased, leased →
  started: from the run's and the task's records); Redis ``used_memory`` each half minute (retention keeps ``--keep-runs``
  runs per job, so it should stay flat once every job has that many);
* listing while the firings go on: ``ListJobs`` first page as ``sparkyard jobs`` asks it, and the console's
  ``/api/jobs`` first page, search (``q``), name, paging (``after``) and a state filter — p50/p99 over
  repeated requests;
* ``kill -9`` of the leader: how long after the kill the standby's first firing came, and, for every
  every-minute job over the minute around the kill (30 s either side), scheduled times missed or run twice.

Part 2 (item 5) — for each size in ``--bursts``: that many jobs submitted with the same ``--at`` second T (with
``--burst-shape cron``: daily cron jobs of one expression whose time is T, the midnight burst);
protocol-level workers of 1,000 slots each, one per 1,000 jobs (at most ``--burst-workers-max``, 20 by default);
from the attempt records, how long after T each task
was leased (p50/p99/max), and from the run records how long after T its run was made (``fire.lua``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import redis as redis_lib

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import EXAMPLES, Cluster, RedisServer, free_port, start_redis, wait_for  # noqa: E402
from protocol_worker import WorkerPool  # noqa: E402
from sparkyard.client import Client, build_spec, build_specs, first_run_id  # noqa: E402
from sparkyard.defaults import DEFAULT_HEARTBEAT_S, DEFAULT_LEASE_S, DEFAULT_REAPER_INTERVAL_S  # noqa: E402
from sparkyard.v1 import sparkyard_pb2 as pb  # noqa: E402

NOOP = f"{EXAMPLES / 'tasks.py'}:noop"
BULK = 1000
SUBMIT_THREADS = 4
# Bursts: protocol-level workers of 1,000 slots, one per 1,000 jobs up to 20 (beyond, slots free up as the
# workers report).
WORKER_SLOTS = 1000
BURST_WORKERS_MAX = 20
CLI_FIRST_PAGE = 50  # what `sparkyard jobs` asks for (master/jobs.py DEFAULT_LIST_LIMIT)
LIST_REPEATS = 100
# Redis as docs/deploy.md configures it (and the embedded one runs): a job's hash in the compact encoding.
# Redis as docs/deploy.md configures it, with its latency monitor on: the firing window's report names what
# blocked Redis itself (a fork for an AOF rewrite, an AOF write waiting on fsync, a slow script) and for how long.
REDIS_CONFIG = ("--hash-max-ziplist-value", "1024", "--latency-monitor-threshold", "10")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(values: list[float]) -> str:
    if not values:
        return "none"
    return f"{statistics.median(values):.0f} / {pct(values, 0.99):.0f} / {max(values):.0f}"


def used_mb(r: redis_lib.Redis) -> float:
    return int(r.info("memory")["used_memory"]) / 2**20


def daily_job(i: int, n: int) -> dict[str, Any]:
    second = i * 86_400 // max(n, 1)
    cron = f"{second % 60} {second // 60 % 60} {second // 3600} * * *"
    return {"cron": cron, "tz": "Europe/Berlin", "name": f"daily-{i:07d}"}


def minute_job(i: int) -> dict[str, Any]:
    return {"cron": f"{i % 60} * * * * *", "name": f"minute-{i:05d}"}


def submit_all(client_for: Callable[[], Client], options: Callable[[int], dict[str, Any]], n: int) -> list[str]:
    """Bulk submits of BULK jobs, from SUBMIT_THREADS clients at once, each call's specs made by one
    ``build_specs`` (the entrypoint checked and packed once a call); the job ids in order."""
    local = threading.local()
    build_spec(NOOP)  # the entrypoint's check parses its file once (cached); Python 3.11's ast is not thread-safe

    def chunk(start: int) -> list[str]:
        if not hasattr(local, "client"):
            local.client = client_for()
        specs = build_specs(NOOP, [options(i) for i in range(start, min(n, start + BULK))])
        return [j.id for j in local.client.submit_many(specs)]

    with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
        return [job_id for ids in pool.map(chunk, range(0, n, BULK)) for job_id in ids]


def timed(call: Callable[[], object], repeats: int = 0) -> list[float]:
    out = []
    for _ in range(repeats or LIST_REPEATS):
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def get_json(address: str, path: str) -> Any:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=30) as reply:
        return json.loads(reply.read())


def lateness(r: redis_lib.Redis, job_ids: list[str], since_ms: int, until_ms: int) -> tuple[dict[str, list[float]], int]:
    """Of every run of these jobs scheduled in [since, until): scheduled → attempt started (ms, ``late``), and
    where that went — scheduled → fired (``fire.lua`` made the run), fired → leased (the task given to a
    worker), leased → started (the worker's report); and how many of those runs have no started attempt."""
    pipe = r.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.zrangebyscore(f"sy:job:{job_id}:runs", since_ms, until_ms - 1, withscores=True)
    runs = [(run_id, int(score)) for rows in pipe.execute() for run_id, score in rows]
    for run_id, _ in runs:
        pipe.hget(f"sy:run:{run_id}", "fired_ms")
        pipe.hmget(f"sy:task:{run_id}.00000", "att_leased_ms", "att_started_ms")
    replies = pipe.execute()
    stages: dict[str, list[float]] = {"late": [], "fired": [], "leased": [], "started": []}
    unstarted = 0
    for i, (_, scheduled) in enumerate(runs):
        fired, (leased, started) = replies[2 * i], replies[2 * i + 1]
        if not (started and int(started)):
            unstarted += 1
            continue
        stages["late"].append(int(started) - scheduled)
        if fired and leased and int(leased):
            stages["fired"].append(int(fired) - scheduled)
            stages["leased"].append(int(leased) - int(fired))
            stages["started"].append(int(started) - int(leased))
    return stages, unstarted


def redis_latency(r: redis_lib.Redis) -> dict[str, Any]:
    """What blocked Redis for 10 ms or more since LATENCY RESET (event → [times seen over 10 ms, the
    longest ms]), and its persistence counters (forks since it started, the last one's ms)."""
    events = {str(e[0]): [len(r.execute_command("LATENCY", "HISTORY", e[0])), int(e[3])]
              for e in r.execute_command("LATENCY", "LATEST")}
    info = r.info("persistence") | r.info("stats")
    return {"events": events, "forks": info.get("total_forks", 0),
            "last_fork_ms": int(info.get("latest_fork_usec", 0)) / 1000,
            "aof_delayed_fsync": info.get("aof_delayed_fsync", 0)}


def failover_check(r: redis_lib.Redis, job_ids: list[str], since_ms: int, until_ms: int) -> dict[str, Any]:
    """For every-minute jobs over [since, until): scheduled times with no run (missed), tasks attempted more
    than once (run twice), and runs that did not succeed."""
    pipe = r.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.zrangebyscore(f"sy:job:{job_id}:runs", since_ms, until_ms - 1, withscores=True)
    present = pipe.execute()
    missed: list[int] = []
    run_ids = []
    for i, rows in enumerate(present):
        second = i % 60
        expected = {m * 60_000 + second * 1000 for m in range(since_ms // 60_000, until_ms // 60_000 + 1)}
        expected = {t for t in expected if since_ms <= t < until_ms}
        missed += sorted(expected - {int(s) for _, s in rows})
        run_ids += [run_id for run_id, _ in rows]
    for run_id in run_ids:
        pipe.hget(f"sy:task:{run_id}.00000", "attempts")
        pipe.hget(f"sy:run:{run_id}", "state")
    answers = pipe.execute()
    twice = sum(1 for a in answers[0::2] if int(a or 0) > 1)
    not_ok = sum(1 for s in answers[1::2] if s != "SUCCEEDED")
    return {"runs": len(run_ids), "missed": len(missed), "twice": twice, "not_succeeded": not_ok,
            "missed_at": sorted(set(missed))}


def first_firing_after(r: redis_lib.Redis, job_ids: list[str], moment_ms: int) -> int:
    pipe = r.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.zrangebyscore(f"sy:job:{job_id}:runs", moment_ms - 60_000, "+inf")
    run_ids = [run_id for rows in pipe.execute() for run_id in rows]
    for run_id in run_ids:
        pipe.hget(f"sy:run:{run_id}", "fired_ms")
    fired = [int(f) for f in pipe.execute() if f and int(f) > moment_ms]
    return min(fired) - moment_ms


# The master's own defaults, over the test harness's short lease and heartbeat: the bench measures what users run.
MASTER_DEFAULTS = ("--lease", str(DEFAULT_LEASE_S), "--heartbeat", str(DEFAULT_HEARTBEAT_S),
                   "--reaper-interval", str(DEFAULT_REAPER_INTERVAL_S))


def start_masters(redis: RedisServer, root: Path, keep_runs: int, leader_lease: float) -> tuple[Cluster, Cluster]:
    """A leader and a standby; ``leader_lease`` (0: the default, 3 s) with a task lease 5 times as long."""
    lease = ("--leader-lease", str(leader_lease), "--lease", str(5 * leader_lease)) if leader_lease else ()
    masters = []
    for name in ("leader", "standby"):
        http = f"127.0.0.1:{free_port()}"
        cluster = Cluster(redis.url, root / name, driver_conf="")
        cluster.start_master(*MASTER_DEFAULTS, "--log-level", "WARNING", "--http", http, "--keep-runs", str(keep_runs),
                             *lease)
        cluster.http["master"] = http
        masters.append(cluster)
    return masters[0], masters[1]


def part_hold(daily: int, minute: int, minutes: int, keep_runs: int, leader_lease: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis(Path(tmp) / "redis", extra=REDIS_CONFIG)
        leader, standby = start_masters(redis, Path(tmp), keep_runs, leader_lease)
        both = f"{leader.address},{standby.address}"
        pool = WorkerPool([leader.address, standby.address], 2, WORKER_SLOTS)
        clients: list[Client] = []

        def client_for() -> Client:
            clients.append(Client(both))
            return clients[-1]

        try:
            r = redis.client()
            assert leader.master is not None
            out["master_before"], out["redis_before"] = rss_mb(leader.master.pid), used_mb(r)
            # The daily jobs first: Redis per job is measured before the every-minute jobs start making runs.
            t0 = time.perf_counter()
            submit_all(client_for, lambda i: daily_job(i, daily), daily)
            daily_s = time.perf_counter() - t0
            out["bytes_per_job"] = (used_mb(r) - out["redis_before"]) * 2**20 / max(daily, 1)
            # What the schedules hold once their submit's idempotency keys have expired (a day later: the
            # master's idempotency TTL): the keys deleted here, as their expiry would.
            idem = list(r.scan_iter("sy:idem:*", count=10_000))
            for i in range(0, len(idem), 10_000):
                r.unlink(*idem[i:i + 10_000])
            out["bytes_per_job_held"] = (used_mb(r) - out["redis_before"]) * 2**20 / max(daily, 1)
            t1 = time.perf_counter()
            minute_ids = submit_all(client_for, minute_job, minute)
            out["submit_s"] = daily_s + time.perf_counter() - t1
            out["jobs"] = r.zcard("sy:schedule")
            out["redis_after"], out["master_after"] = used_mb(r), rss_mb(leader.master.pid)

            # Firing: from the next whole minute on, for `minutes` minutes.
            r.execute_command("LATENCY", "RESET")
            start_ms = (int(time.time()) // 60 + 1) * 60_000
            until_ms = start_ms + minutes * 60_000
            memory: list[tuple[int, float]] = []
            while time.time() * 1000 < until_ms + 5_000:
                memory.append((int(time.time()), used_mb(r)))
                time.sleep(30)
            out["memory"] = memory
            out["master_firing"] = rss_mb(leader.master.pid)
            out["late"], out["unstarted"] = lateness(r, minute_ids, start_ms, until_ms)
            out["redis_latency"] = redis_latency(r)

            # Listing while the firings go on.
            client = client_for()
            http = leader.http["master"]
            first = get_json(http, "/api/jobs")
            out["list"] = {
                "ListJobs first page (sparkyard jobs)": timed(lambda: client.jobs(limit=CLI_FIRST_PAGE)),
                "console /api/jobs": timed(lambda: get_json(http, "/api/jobs")),
                "console /api/jobs next page": timed(
                    lambda: get_json(http, f"/api/jobs?after={first.get('next') or ''}")),
                "console /api/jobs?q=minute-00042": timed(lambda: get_json(http, "/api/jobs?q=minute-00042")),
                "console /api/jobs?name=daily-0000042": timed(lambda: get_json(http, "/api/jobs?name=daily-0000042")),
                "console /api/jobs?state=paused": timed(lambda: get_json(http, "/api/jobs?state=paused"), 10),
                "ListJobs state=paused": timed(lambda: client.jobs(limit=CLI_FIRST_PAGE, state="paused"), 10),
            }

            # kill -9 of the leader in the middle of a minute's firings.
            time.sleep(30 - time.time() % 60 % 30 + 0.5)
            kill_ms = out["kill_ms"] = int(time.time() * 1000)
            os.kill(leader.master.pid, signal.SIGKILL)
            leader.master.process.wait(timeout=10)
            wait_for(lambda: first_firing_after(r, minute_ids, kill_ms) > 0, 60, "a firing by the standby", 0.2)
            out["first_firing_s"] = first_firing_after(r, minute_ids, kill_ms) / 1000
            # One firing of each every-minute job in the minute around the kill, looked at 10 s later: with
            # --keep-runs 3 retention keeps it (and at most one newer run).
            check_until = kill_ms + 30_000
            wait_for(lambda: time.time() * 1000 > check_until + 10_000, 120, "half a minute past the kill", 1)
            out["failover"] = failover_check(r, minute_ids, kill_ms - 30_000, check_until)
            return out
        except BaseException:
            print(leader.logs(), standby.logs(), sep="\n", file=sys.stderr)
            raise
        finally:
            pool.close()
            for c in clients:
                c.close()
            standby.stop()
            leader.stop()
            redis.stop()


def burst_spec(shape: str, at: int) -> pb.JobSpec:
    """A job of a burst due at second ``at``: one-shot (``--at``), or a daily cron job whose time it is (the
    midnight burst of every ``0 0 * * *`` job: one expression, one fire time)."""
    if shape == "at":
        return build_spec(NOOP, at=at)
    t = time.gmtime(at)
    return build_spec(NOOP, cron=f"{t.tm_sec} {t.tm_min} {t.tm_hour} * * *")


def part_burst(n: int, shape: str = "at", workers_max: int = BURST_WORKERS_MAX) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis(Path(tmp) / "redis", extra=REDIS_CONFIG)
        cluster = Cluster(redis.url, Path(tmp) / "cluster", driver_conf="")
        pool = None
        try:
            cluster.start_master(*MASTER_DEFAULTS, "--log-level", "WARNING")
            client = cluster.client()
            count = min(workers_max, -(-n // WORKER_SLOTS))  # a worker registers 1..1024 slots
            pool = WorkerPool([cluster.address], count, WORKER_SLOTS)
            wait_for(lambda: len(client.workers()) == count, 30, "the protocol-level workers")
            at = int(time.time()) + 8 + n // 1000  # a whole second, far enough ahead for the submit to finish
            jobs = []
            for start in range(0, n, BULK):
                jobs += client.submit_many([burst_spec(shape, at) for _ in range(min(BULK, n - start))])
            assert time.time() < at, "submitting took longer than the lead time"
            r = redis.client()
            run_keys = [f"sy:run:{first_run_id(j)}" for j in jobs]

            def succeeded(keys: list[str]) -> bool:
                pipe = r.pipeline(transaction=False)
                for key in keys:
                    pipe.hget(key, "state")
                return all(s == "SUCCEEDED" for s in pipe.execute())

            def all_done() -> bool:
                # The jobs fire in no particular order: the last ones submitted and no lease held can both be
                # true while others are still to fire. So every run is looked at, once the cheap check holds.
                return succeeded(run_keys[-200:]) and client.status().leased == 0 and succeeded(run_keys)

            wait_for(all_done, 120 + n // 500, "all runs to succeed", interval=0.1)
            pipe = r.pipeline(transaction=False)
            for job in jobs:  # the (only) attempt of each task is in the task hash (common/keys.py)
                pipe.hget(f"sy:run:{first_run_id(job)}", "fired_ms")
                pipe.hget(f"sy:task:{first_run_id(job)}.00000", "att_leased_ms")
            replies = pipe.execute()
            fired = [float(int(x) - at * 1000) for x in replies[0::2]]
            leased = [float(int(x) - at * 1000) for x in replies[1::2]]
            return {"jobs": n, "fired": fired, "leased": leased}
        finally:
            if pool is not None:
                pool.close()
            cluster.stop()
            redis.stop()


def report_hold(h: dict[str, Any]) -> None:
    print("| jobs held | submit s | Redis B/job: after the submit; once its idempotency keys expired | master RSS MB "
          "before → after submit → after firing |\n|---|---|---|---|")
    print(f"| {h['jobs']:,} | {h['submit_s']:.1f} | {h['bytes_per_job']:.0f}; {h['bytes_per_job_held']:.0f} | "
          f"{h['master_before']:.0f} → {h['master_after']:.0f} → {h['master_firing']:.0f} |")
    late = h["late"]
    print(f"\nevery-minute lateness, scheduled → attempt started, ms p50 / p99 / max over {len(late['late']):,} runs: "
          f"{spread(late['late'])} (not started: {h['unstarted']}); of it, scheduled → fired {spread(late['fired'])}, "
          f"fired → leased {spread(late['leased'])}, leased → started {spread(late['started'])}")
    print("Redis used_memory MB over the firing: " + ", ".join(f"{mb:.1f}" for _, mb in h["memory"]))
    lat = h["redis_latency"]
    print("Redis blocked ≥ 10 ms during the firing (event: times, longest ms): "
          + (", ".join(f"{e}: {n}, {ms}" for e, (n, ms) in sorted(lat["events"].items())) or "never")
          + f"; forks since Redis started {lat['forks']}, the last {lat['last_fork_ms']:.1f} ms, "
          f"delayed AOF fsyncs {lat['aof_delayed_fsync']}")
    print("\n| listing | ms p50 / p99 / max |\n|---|---|")
    for what, values in h["list"].items():
        print(f"| {what} | {spread(values)} |")
    f = h["failover"]
    print(f"\nkill -9 of the leader: the standby's first firing {h['first_firing_s']:.2f} s later; over the "
          f"minute around the kill {f['runs']:,} runs, {f['missed']} scheduled times missed, {f['twice']} run "
          f"twice, {f['not_succeeded']} not succeeded")
    if f["missed"]:
        print(f"missed scheduled times, s after the kill: {[(t - h['kill_ms']) / 1000 for t in f['missed_at']]}")


def main() -> int:
    global LIST_REPEATS, SUBMIT_THREADS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--daily", type=int, default=990_000, help="daily cron jobs held, spread over the day")
    parser.add_argument("--every-minute", type=int, default=10_000,
                        help="every-minute jobs (spread over the minute's seconds) that fire while they are held")
    parser.add_argument("--minutes", type=int, default=3, help="minutes of firing measured")
    parser.add_argument("--keep-runs", type=int, default=3, help="the master's --keep-runs (retention)")
    parser.add_argument("--bursts", default="10000,100000", help="comma-separated sizes; empty: none")
    parser.add_argument("--burst-shape", choices=("at", "cron"), default="at",
                        help="a burst's jobs one-shot (--at T) or daily cron jobs due at T (the midnight burst)")
    parser.add_argument("--burst-workers-max", type=int, default=BURST_WORKERS_MAX,
                        help=f"most protocol-level workers of {WORKER_SLOTS:,} slots a burst gets (one per "
                             f"{WORKER_SLOTS:,} jobs)")
    parser.add_argument("--list-repeats", type=int, default=LIST_REPEATS, help="requests timed per listing")
    parser.add_argument("--submit-threads", type=int, default=SUBMIT_THREADS,
                        help="client threads sending the bulk submit's calls at once")
    parser.add_argument("--leader-lease", type=float, default=0,
                        help="seconds (0: the default); on a machine so loaded that a 3 s lease is lost")
    args = parser.parse_args()
    LIST_REPEATS, SUBMIT_THREADS = args.list_repeats, args.submit_threads
    commit = os.popen("git rev-parse --short HEAD").read().strip()
    print(f"commit {commit}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}",
          flush=True)
    if args.daily or args.every_minute:
        report_hold(part_hold(args.daily, args.every_minute, args.minutes, args.keep_runs, args.leader_lease))
    sizes = [int(s) for s in args.bursts.split(",") if s]
    if sizes:
        print(f"\n| jobs due in the same second ({args.burst_shape}) | leased after the fire second p50 / p99 / max ms "
              "| of it, fired (the run made) after it |\n|---|---|---|")
    for n in sizes:
        b = part_burst(n, args.burst_shape, args.burst_workers_max)
        print(f"| {b['jobs']:,} | {spread(b['leased'])} | {spread(b['fired'])} |", flush=True)
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
