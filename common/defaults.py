"""Every default of a process setting, each named with the reason for it (the config fields of
:mod:`sparkyard.config` and the flags' help take them from here)."""

from __future__ import annotations

# The master's gRPC address when none is given; loopback so a fresh install exposes nothing.
DEFAULT_LISTEN = "127.0.0.1:7070"
DEFAULT_MASTER = "127.0.0.1:7070"
# Where an embedded Redis and the master's files live (relative to the working directory).
DEFAULT_DATA_DIR = ".sparkyard"
# Task lease and worker heartbeat: a lease must survive several missed heartbeats and a master failover
# (a standby takes over after DEFAULT_LEADER_LEASE_S), so 15 s with a 3 s heartbeat.
DEFAULT_LEASE_S = 15.0
DEFAULT_HEARTBEAT_S = 3.0
# A worker that misses this many heartbeats is marked dead (its leases then expire on their own).
DEFAULT_DEAD_AFTER_HEARTBEATS = 3
# How often the reaper looks for expired leases and master-side timeouts; bounds requeue delay.
DEFAULT_REAPER_INTERVAL_S = 1.0
# A task whose lease expires more than this many times is a poison task and goes DEAD.
DEFAULT_MAX_LOST = 3
# The master fails an attempt this long after its task timeout if the worker has not (worker hung).
DEFAULT_TIMEOUT_GRACE_S = 10.0
# A client retrying a submit within this window with the same idempotency key gets the same job.
DEFAULT_IDEMPOTENCY_TTL_S = 24 * 3600.0
# Upper bound of tasks claimed in one dispatch round (one Lua call, ~40 µs of Redis a task: ~45 ms at most).
# 10,000 jobs due in the same second were leased ~25% sooner with 1,024 than with 512, as soon with 2,048,
# which holds Redis and the master's loop twice as long per round (docs/benchmarks.md, "Bursts").
DEFAULT_DISPATCH_BATCH = 1024
# Schedule entries due within this horizon are preloaded into the timing wheel (LTS PreLoader).
DEFAULT_PRELOAD_HORIZON_S = 60.0
# A scheduled run is fired (created, its task leased) this long before its time and the worker starts it at
# its time: the firing, the lease and the delivery then happen before the second, not in it, so a run starts
# within milliseconds of its time though ~167 are due every second (10,000 every-minute jobs; fired at their
# time they started 43 ms late p99, 63 ms with a million schedules held; docs/benchmarks.md). Each run holds
# its worker's slot this long before it starts, so it is short: ~3x what those steps take at the p99 of
# the million-schedule benchmark (a burst due in one second goes further ahead: master/arming.py).
DEFAULT_FIRE_AHEAD_S = 0.25
# The longest a WaitRun call may block; clients loop for longer waits.
DEFAULT_WAIT_MAX_S = 3600.0
# A firing that happens this much later than its scheduled time is a misfire (master was down, job
# paused) and the job's misfire policy decides what to do with it.
DEFAULT_MISFIRE_THRESHOLD_S = 5.0
# Ready-queue aging: one priority point is worth this much waiting (see master/store.py ready_score).
DEFAULT_PRIORITY_AGING_S = 1.0
# Messages queued for one worker's stream before the master stops dispatching to it (backpressure).
DEFAULT_OUTBOUND_QUEUE = 1024
# Leader election (master/leader.py): the leader's lease in Redis. A standby takes over about this long
# after the leader dies; it must stay well inside the task lease so running tasks keep their leases across
# a change of leader.
DEFAULT_LEADER_LEASE_S = 3.0
# How long a master's start waits for a given Redis to answer: a first start should fail soon on a wrong
# address; a master that lost the leadership (often because Redis went away) comes back as a standby and
# waits as long as it takes, logging at this interval.
DEFAULT_REDIS_CONNECT_WAIT_S = 30.0
# Grace given to in-flight RPCs on shutdown.
DEFAULT_SHUTDOWN_GRACE_S = 5.0
# Largest bundle of shipped code (a job's files, zipped) the master stores: big enough for a project with
# its helper modules and small data files, small enough that Redis memory stays bounded.
DEFAULT_MAX_BUNDLE_BYTES = 64 * 1024 * 1024
# Retention (master/retention.py): a job keeps at most this many ended runs (with their tasks, attempts and
# log metadata), newest first — enough to see a recurring job's recent pattern of failures, while a 1 s job
# no longer grows Redis without bound (Redis runs with noeviction: growth ends in OOM errors).
DEFAULT_KEEP_RUNS = 100
# Ended runs, and ended (completed or cancelled) jobs, older than this are deleted: a week of history covers
# the usual "what happened last weekend" question; the workers keep attempt logs as long (log_retention_s).
DEFAULT_HISTORY_MAX_AGE_S = 7 * 24 * 3600.0
# How long the retention loop rests after a full pass over the jobs that found nothing more to delete.
DEFAULT_RETENTION_INTERVAL_S = 5.0
# Size limits of what the master accepts (docs/limits.md). Each is a flag (--max-message, --max-args, ...)
# and over it a call is refused with RESOURCE_EXHAUSTED naming the limit and its flag.
# One gRPC message: far above a bulk submit of thousands of jobs or a worker's batch of 500 results, while
# a runaway client cannot make the master hold more than this per call (bundles stream in 1 MiB chunks).
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# A job's arguments, all together: they are stored with the job and sent with every task; data belongs in
# a file, a bundle or --inputs. (A 16 MB argument is refused.)
DEFAULT_MAX_ARGS_BYTES = 1024 * 1024
# A job's environment (names and values): it is set in every task's processes, and Linux refuses a
# single environment string over 128 KiB.
DEFAULT_MAX_ENV_BYTES = 64 * 1024
# A job's Spark conf (keys and values): real confs are a few KiB; it is stored with the job.
DEFAULT_MAX_CONF_BYTES = 256 * 1024
# Inputs of one run (--inputs): each is stored in its task's record; runs are cut into at most 10,000
# tasks, so this allows 10 inputs per task at the largest split.
DEFAULT_MAX_INPUTS = 100_000
# Worker: disk kept for extracted bundles (least recently used ones beyond it are removed).
DEFAULT_BUNDLE_CACHE_BYTES = 2 * 1024 * 1024 * 1024
# Largest task result kept (JSON bytes); larger results fail the attempt with a clear error.
DEFAULT_RESULT_MAX_BYTES = 1024 * 1024
# Worker: slots (its node group and runner: DEFAULT_GROUP, DEFAULT_RUNNER); how long a draining worker lets
# running tasks finish.
DEFAULT_SLOTS = 2
# The port of a Spark Connect URL that names none (Spark's own default).
DEFAULT_CONNECT_PORT = 15002
DEFAULT_DRAIN_TIMEOUT_S = 60.0
# Worker: kill a task when its lease could not be renewed for (lease - margin) — before the master
# can give the task to another worker (self-fencing).
DEFAULT_SELF_FENCE_MARGIN_S = 2.0
# Worker, session and connect runners: a driver that sees its worker stopped (SIGSTOP, a frozen container) this
# long stops the running attempt itself — shorter than any lease a master accepts, long enough that a worker
# paused for a moment (a debugger's attach, a scheduler hiccup) does not lose its attempt.
DEFAULT_DRIVER_FROZEN_LIMIT_S = 1.0
# Worker, session runner: a warm driver process is replaced after this many attempts (bounds what user
# code can leak into a long-lived process). A replacement costs a JVM start (~10 CPU-seconds on a small
# machine), so for short tasks this is ~1 ms per task amortised; it warms during the old driver's last
# attempt. 1 gives every attempt a fresh driver.
DEFAULT_DRIVER_MAX_TASKS = 10_000
# How long an attempt waits for a runner that cannot run it (no driver starts, no Spark Connect server)
# before it fails with the runner's reason, so that its retry can go to another worker.
DEFAULT_RUNNER_WAIT_MAX_S = 300.0
# Worker: most tasks held beyond its slots, queued locally so a slot never waits a round trip for its next
# task (the worker asks for fewer, by Little's law: worker/prefetch.py). 0 turns prefetch off.
DEFAULT_PREFETCH_MAX = 256
# How long a worker keeps attempt logs and scratch directories (swept at start and then periodically).
DEFAULT_LOG_RETENTION_S = 7 * 24 * 3600.0
# Client: deadline of a unary call (WaitRun sets its own).
DEFAULT_CALL_TIMEOUT_S = 30.0
