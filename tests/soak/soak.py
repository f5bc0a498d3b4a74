"""A nemesis soak: random faults, overlapping, for N minutes, at a workload whose every effect is recorded; then
heal, wait for quiet, and check that nothing was lost, duplicated or run twice at once.

    .venv/bin/python tests/soak/soak.py --minutes 3 --seed 22 [--suite-jvm]

The cluster is the network-namespace one of tests/cluster (netcluster.py), each process a host of its own:
Redis primary and two replicas under a sentinel (redis_ha.py), two masters (``master``, ``m2``) given the
sentinel's URL, three workers — ``w1`` and ``w2`` with warm session drivers, ``w3`` on the submit runner
(a spark-submit per task) — each worker's work directory on a 64 MB tmpfs of its own (the disk the nemesis
fills). The workload is workload.py, the faults nemesis.py (their schedule is drawn from the seed alone and
printed first), the checker verdict.py. Exit status 0 only when every count is 0; without CAP_NET_ADMIN it
prints why it skips and exits 0. Everything it started is stopped by pid and the network removed, also on
failure or Ctrl-C; the logs stay in the printed directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "cluster")]

from harness import worker_jvm_args  # noqa: E402
from ledger import Findings  # noqa: E402
from nemesis import DISK_MB, WORKERS, Nemesis, kind_skips, remove_faketime_files, schedule  # noqa: E402
from netcluster import PROXY_VARS, NetCluster, stop_all  # noqa: E402
from netns import cleanup_stale, netns_pids, unavailable_reason  # noqa: E402
from redis_ha import RedisHA  # noqa: E402
from verdict import KINDS, check, leftovers, unanswered_that_ran, wait_quiet  # noqa: E402
from workload import Workload  # noqa: E402

LEASE_S, HEARTBEAT_S = 8.0, 1.2  # as the fault suite's shared network (tests/conftest.py)
RUNNERS = {"w1": "session", "w2": "session", "w3": "submit"}
CHECK_CALL_TIMEOUT_S = 300.0
# How long the teardown waits for the hosts' last processes (drivers, their JVMs) to end after their workers.
LEFTOVER_WAIT_S = 30.0
# A task lost to faults is requeued however often (DEAD would be the configuration's verdict, not a loss),
# and every run is kept (the checker reads them all: a job keeps its newest 100 by default).
MASTER_CONFIG = "[master]\nmax_lost = 1000000\nkeep_runs = 1000000\n"


def say(line: str) -> None:
    print(f"soak {time.strftime('%H:%M:%S')} {line}", flush=True)


class Soak:
    def __init__(self, minutes: float, seed: int, quiet_timeout: float, root: Path, min_replicas: int = 2,
                 suite_jvm: bool = False) -> None:
        self.minutes, self.seed, self.quiet_timeout, self.root = minutes, seed, quiet_timeout, root
        self.min_replicas = min_replicas
        self.net = NetCluster(root / "hosts", root / "client" / "submit", lease_s=LEASE_S, heartbeat_s=HEARTBEAT_S,
                              worker_args=tuple(worker_jvm_args()) if suite_jvm else ())
        self.redis = RedisHA(self.net)
        self.mounts: list[Path] = []
        self.findings = Findings()
        self.checked = False  # the checker ran (a soak that failed before it has no counts to show)
        self.stored_unanswered: list[str] = []  # submits no answer named that the master stored (and ran)
        self.began = time.time()  # libfaketime's files in /dev/shm made since are this soak's (teardown)

    def start_worker(self, worker: str, env: dict[str, str] | None = None) -> None:
        self.net.start_worker(worker, runner=RUNNERS[worker], env=env)

    def build(self) -> None:
        net = self.net
        net.root.mkdir(parents=True)
        net.submit_dir.mkdir(parents=True)
        net.create_network()
        net.redis_url = self.redis.start()
        config = net.root / "master.toml"
        config.write_text(MASTER_CONFIG)
        for name in ("master", "m2"):
            net.start_master("--redis-min-replicas", str(self.min_replicas), "--config", str(config), name=name)
        for worker in WORKERS:
            work = net.root / worker / "work"
            work.mkdir(parents=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", f"soak-{worker}", str(work)], check=True)
            self.mounts.append(work)
            self.start_worker(worker)
        net.wait_workers(*WORKERS, timeout=300)

    def run(self) -> bool:
        faults = schedule(self.seed, self.minutes * 60)
        skips = kind_skips()
        say(f"seed {self.seed}, {self.minutes:g} min: {len(faults)} faults scheduled "
            f"(at, kind, target, held):\n" + "\n".join(f"    {f}" for f in faults))
        for kind, reason in skips.items():
            say(f"fault kind {kind} skipped: {reason}")
        say(f"building the cluster under {self.root}")
        self.build()
        client = self.net.failover_client(timeout=5)
        ledger = self.net.root / "ledger.jsonl"
        workload = Workload(self.net, client, ledger)
        nemesis = Nemesis(self.net, self.redis, self.start_worker, skips)
        try:
            workload.start()
            started = time.monotonic()
            say("workload and nemesis started")
            nemesis.run(faults, started, lambda line: say(f"  {line}"))
            while time.monotonic() - started < self.minutes * 60:
                time.sleep(0.5)
            say("time is up: workload stops, every fault heals")
            workload.stop()
            nemesis.heal_all()
            self.net.wait_workers(*WORKERS, timeout=300)
            healed = time.monotonic()
            # The checker reads every run of every job, with its tasks: an hour of an every-second job is 3,600
            # runs in one ListRuns, more than the workload's 5 s calls allow on a loaded machine.
            with self.net.failover_client(timeout=CHECK_CALL_TIMEOUT_S) as checker:
                quiet = wait_quiet(checker, [*workload.job_ids(), *unanswered_that_ran(workload, ledger)],
                                   self.quiet_timeout)
                say(f"quiet {quiet:.1f}s after the heal" if quiet is not None else
                    f"NOT quiet {self.quiet_timeout:g}s after the heal")
                verdict = check(workload, checker, ledger)
            self.findings = verdict.findings
            self.stored_unanswered = verdict.stored_unanswered
            self.checked = True
            say(f"healed to checked in {time.monotonic() - healed:.1f}s")
        finally:
            client.close()
        injected: Counter[str] = Counter()
        for what, n in nemesis.injected.items():
            injected[what] += n
        say("faults injected, by kind and target:\n" + "\n".join(f"    {n:4d}  {what}" for what, n in
                                                                  sorted(injected.items())))
        by_kind: Counter[str] = Counter()
        for what, n in injected.items():
            by_kind[what.split()[0] + (" (skipped)" if "skipped" in what else "")] += n
        say("faults injected, by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())))
        if nemesis.busy:
            say("not injected (target under another fault, or none to hit): " +
                ", ".join(f"{k} {n}" for k, n in sorted(nemesis.busy.items())))
        say(f"workload: {len(workload.acknowledged)} submits acknowledged "
            f"({', '.join(f'{k} {n}' for k, n in sorted(Counter(workload.acknowledged.values()).items()))}), "
            f"{len(workload.pipeline_runs)} pipeline triggers, {len(workload.unanswered)} not acknowledged in time "
            f"({len(self.stored_unanswered)} of them stored by the master and run: audited like the others)")
        say(self.findings.summary())
        for error in nemesis.errors:
            say(f"nemesis error: {error}")
        return not nemesis.errors

    def teardown(self) -> list[str]:
        """Every server process stopped by pid (continued first; SIGKILL after 20 s), then what is left on
        any host counted, libfaketime's files of the ended skewed processes removed, then the network removed
        and the tmpfs unmounted."""
        for proc in stop_all([*self.net.workers.values(), *self.net.masters.values(), *self.redis.nodes.values()],
                             timeout=20):
            self.findings.add("process left behind", f"{proc.name} (pid {proc.pid}) ignored SIGTERM for 20 s")
        # Drivers end with their worker (parent-death signal), their JVMs once the driver's pipe closes: on a
        # loaded machine that can take more than the second this once waited. What outlives the wait is left.
        deadline = time.monotonic() + LEFTOVER_WAIT_S
        while time.monotonic() < deadline and any(netns_pids(h.netns) for h in self.net.network.hosts.values()):
            time.sleep(0.2)
        leftovers(self.net, self.findings)
        removed = remove_faketime_files(self.began)
        if removed:
            say(f"removed {len(removed)} files libfaketime left in /dev/shm (a pair per skewed process)")
        errors = self.net.stop()
        for mount in self.mounts:
            umount = subprocess.run(["umount", str(mount)], capture_output=True, text=True)
            if umount.returncode != 0:
                errors.append(f"umount {mount}: {umount.stderr.strip()}")
        return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, required=True, help="how long the nemesis runs")
    parser.add_argument("--seed", type=int, required=True, help="seeds the fault schedule (same seed, same schedule)")
    parser.add_argument("--quiet-timeout", type=float, default=600, help="seconds after the heal for every run to "
                        "end (default 600)")
    parser.add_argument("--redis-min-replicas", type=int, default=2, choices=(1, 2),
                        help="the masters' --redis-min-replicas (Redis has two replicas; with 1, a failover may "
                             "take back an acknowledged write: docs/reliability.md, finding 9)")
    parser.add_argument("--dir", type=Path, help="where the logs go (default: a new directory under /tmp, kept)")
    parser.add_argument("--suite-jvm", action="store_true",
                        help="the workers' drivers start as the test suite's (quick JIT, the suite's class archive), "
                             "as deploy/test.sh runs it beside the slow tiers; without it, at the default JVM "
                             "options, whose class archive a fresh machine's workers make first")
    args = parser.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        print(f"soak skipped: {reason}", flush=True)
        return 0
    for var in PROXY_VARS:  # the client host talks to the test network directly
        os.environ.pop(var, None)
    removed = cleanup_stale()
    if removed:
        say(f"removed leftovers of earlier runs: {' '.join(removed)}")
    root = args.dir or Path(tempfile.mkdtemp(prefix="sparkyard-soak-"))
    soak = Soak(args.minutes, args.seed, args.quiet_timeout, root, args.redis_min_replicas, args.suite_jvm)
    ran = False
    try:
        ran = soak.run()
    except BaseException:
        say(f"the soak failed; logs in {root / 'hosts'}")
        raise
    finally:
        errors = soak.teardown()
        for error in errors:
            say(f"teardown: {error}")
        counts = {kind: soak.findings.by_kind.get(kind, 0) for kind in KINDS}
        say(("checker: " if soak.checked else "checker (not reached; teardown only): ") +
            ", ".join(f"{n} {kind}" for kind, n in counts.items()))
        for violation in soak.findings.violations[:200]:
            say(f"  violation: {violation}")
    ok = ran and not errors and not soak.findings.violations
    say(f"{'PASSED' if ok else 'FAILED'} (seed {args.seed}, {args.minutes:g} min); logs in {root}")
    if ok and args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
