"""When a job fires: first and next fire times of every trigger kind, and misfire plans (pure, no I/O).

All times are integer epoch milliseconds. Trigger kinds (``JobSpec.trigger``):

* ``now`` / ``at`` / ``delay`` — one firing, then the job is COMPLETED;
* ``cron`` — 5 fields (minute first) or 6 (seconds first, as in Quartz/XXL-JOB), in ``tz`` (IANA, default
  UTC), DST-correct through croniter: a time that does not exist (spring forward) fires at the first
  instant after the gap, a time that exists twice (fall back) fires once;
* ``every`` — fixed rate (next = previous *scheduled* time + interval, so the cadence never drifts) or,
  with ``fixed_delay``, next = end of the previous run + interval (:data:`AFTER_RUN` until it ends).

Recurring triggers stop at ``end_at`` and after ``max_runs`` firings.

A schedule entry handled more than the misfire threshold after it was due (master down, job paused) is a
*misfire*: every fire time before now is missed, and :func:`plan` applies the job's misfire policy, after
which the schedule continues at the first fire time from now on (as Quartz does — no burst of late runs):

* ``SKIP`` — nothing runs for the missed period; it is recorded as one SKIPPED run;
* ``FIRE_ONCE`` (default) — one run for the whole missed period;
* ``CATCH_UP`` — one run per missed time, the most recent ``limit`` of them (older ones are recorded
  as one SKIPPED run).

An entry handled late but within the threshold (a busy moment) simply fires, and the schedule continues
from its scheduled time, so a fixed-rate job does not drift.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from croniter import croniter

from sparkyard.spec import parsed_cron
from sparkyard.v1 import sparkyard_pb2 as pb

# No further firing.
NONE = -1
# Fixed delay: the next fire time is set when the current run ends.
AFTER_RUN = -2
# Upper bound of missed fire times enumerated for one plan (a `--every 100ms` job down for a day
# would otherwise list ~900k times); beyond it a fixed-rate job's count is computed, a cron job's is
# reported as this lower bound.
MAX_ENUMERATED_MISSES = 10_000


# croniter's random field (``R``): drawn when the expression is parsed, so such expressions are not kept.
_RANDOM_FIELD = re.compile(r"\bR\b")


def _ms(d: object) -> int:
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000  # type: ignore[attr-defined]


def _cron_after(cron: pb.Trigger.Cron, after_ms: int) -> int:
    """The first cron time strictly after ``after_ms``.

    When the clocks go back, the wall times of the repeated hour happen twice. Like Vixie cron, a job
    with a fixed hour fires at the first of the two only (``30 2 * * *`` runs once that night), while a job
    whose hour field is a wildcard (``*/30 * * * *``, ``0 * * * *``) follows elapsed time and fires in both.
    """
    if _RANDOM_FIELD.search(cron.expr):  # croniter draws an R field when it parses: a draw per use, as before
        return _cron_compute(cron.expr, cron.tz, after_ms, random=True)
    # Cron times are whole seconds, so the first one after any moment of a second is the first one after
    # the second's start: the jobs of one expression submitted in the same second share one computation.
    return _cron_next(cron.expr, cron.tz, after_ms - after_ms % 1000)


@functools.lru_cache(maxsize=4096)
def _cron_next(expr: str, tz: str, after_ms: int) -> int:
    """:func:`_cron_compute` kept: the jobs of one expression due together (every ``0 0 * * *`` job at
    midnight) need the same next time, which cost each of them ~50 µs of croniter, most of a firing's plan."""
    return _cron_compute(expr, tz, after_ms, random=False)


def _cron_compute(expr: str, tz: str, after_ms: int, *, random: bool) -> int:
    zone = ZoneInfo(tz) if tz else timezone.utc
    fields = expr.split()
    six = len(fields) == 6
    hour_field = fields[2] if six else fields[1]
    start = datetime.fromtimestamp(after_ms / 1000, tz=zone)
    if random:
        it = croniter(expr, start, second_at_beginning=six)
    else:
        # The parse validation kept (a bulk submit of daily jobs spent a third of the master's CPU parsing each
        # expression twice), copied for a position of its own: backfills enumerate in another thread.
        it = copy.copy(parsed_cron(expr, six))
    nxt: datetime = it.get_next(datetime, start_time=start)
    if not hour_field.startswith("*") and nxt.replace(tzinfo=None) <= start.replace(tzinfo=None):
        nxt = it.get_next(datetime)  # the same wall time again, in the repeated hour: skip it
    return int(round(nxt.timestamp() * 1000))


def first_fire_ms(trigger: pb.Trigger, now_ms: int) -> int:
    """The first fire time of a newly submitted job."""
    kind = trigger.WhichOneof("kind")
    if kind == "at":
        return trigger.at.ToMilliseconds()
    if kind == "delay":
        return now_ms + _ms(trigger.delay)
    start = max(now_ms, trigger.start_at.ToMilliseconds()) if trigger.HasField("start_at") else now_ms
    if kind == "cron":
        first = _cron_after(trigger.cron, start - 1)
    elif kind == "every":
        first = start
    else:
        return now_ms
    return _bounded(trigger, first, 0)


def _bounded(trigger: pb.Trigger, candidate: int, runs_done: int) -> int:
    if trigger.max_runs and runs_done >= trigger.max_runs:
        return NONE
    if trigger.HasField("end_at") and candidate > trigger.end_at.ToMilliseconds():
        return NONE
    return candidate


def is_recurring(trigger: pb.Trigger) -> bool:
    return trigger.WhichOneof("kind") in ("cron", "every")


def next_fire_ms(trigger: pb.Trigger, scheduled_ms: int, runs_done: int) -> int:
    """The fire time after ``scheduled_ms`` given ``runs_done`` firings so far (this one included)."""
    kind = trigger.WhichOneof("kind")
    if kind == "cron":
        return _bounded(trigger, _cron_after(trigger.cron, scheduled_ms), runs_done)
    if kind == "every":
        if trigger.every.fixed_delay:
            return AFTER_RUN if _bounded(trigger, scheduled_ms, runs_done) != NONE else NONE
        return _bounded(trigger, scheduled_ms + _ms(trigger.every.interval), runs_done)
    return NONE


class NoCadence(ValueError):
    """The trigger fires once, or after runs end: it has no past fire times to backfill."""


def backfill_times(trigger: pb.Trigger, start_ms: int, end_ms: int, limit: int) -> list[int]:
    """The fire times of a recurring trigger from ``start_ms`` to ``end_ms`` (both included), for a backfill.

    A cron job's are its calendar's; a fixed-rate job's are ``start_ms`` plus whole intervals (it has no
    calendar: the range itself is the anchor). ``end_at`` and ``max_runs`` bound the schedule, not a
    backfill the user asked for. Raises ValueError past ``limit`` times, :class:`NoCadence` for a trigger
    that has no fire times of its own to go back over.
    """
    kind = trigger.WhichOneof("kind")
    if kind == "cron":
        step = lambda t: _cron_after(trigger.cron, t)  # noqa: E731
        t = step(start_ms - 1)
    elif kind == "every" and not trigger.every.fixed_delay:
        interval = _ms(trigger.every.interval)
        step = lambda t: t + interval  # noqa: E731
        t = start_ms
    else:
        what = ("a fixed-delay job (its times depend on when runs end)" if kind == "every"
                else f"a one-shot job ({kind})")
        raise NoCadence(f"backfill needs a cron or fixed-rate job, not {what}")
    times: list[int] = []
    while t <= end_ms:
        if len(times) == limit:
            raise ValueError(f"the range has more than {limit} fire times: backfill a shorter range at a time")
        times.append(t)
        t = step(t)
    return times


def after_run_ms(trigger: pb.Trigger, run_finished_ms: int, runs_done: int) -> int:
    """Fixed delay: the next fire time once the previous run ended."""
    return _bounded(trigger, run_finished_ms + _ms(trigger.every.interval), runs_done)


@dataclass(frozen=True)
class FirePlan:
    """What to do with a due schedule entry."""

    fires: list[int] = field(default_factory=list)  # scheduled times to run, in order
    skipped_at: int = NONE  # scheduled time of the SKIPPED run recording missed firings (NONE: none)
    skip_reason: str = ""
    next_ms: int = NONE  # the schedule entry after the last firing (or NONE / AFTER_RUN)
    missed: int = 0  # fire times that were due more than the threshold ago


def plan(spec: pb.JobSpec, due_ms: int, now_ms: int, threshold_ms: int, runs_done: int) -> FirePlan:
    """Decide the firings for the schedule entry ``due_ms`` handled at ``now_ms``.

    ``runs_done`` counts the job's runs so far; ``max_runs`` bounds the runs that really happen, so
    missed (skipped) fire times do not use it up.
    """
    trigger = spec.trigger
    late = now_ms - due_ms
    if late <= threshold_ms or not is_recurring(trigger) or trigger.every.fixed_delay:
        # On time, or a one-shot / fixed-delay job: it has exactly this one firing to do.
        return FirePlan(fires=[due_ms], next_ms=next_fire_ms(trigger, due_ms, runs_done + 1))
    unbounded = pb.Trigger()
    unbounded.CopyFrom(trigger)
    unbounded.max_runs = 0
    missed = [due_ms]
    t = due_ms
    while len(missed) < MAX_ENUMERATED_MISSES:
        t = next_fire_ms(unbounded, t, 0)
        if t < 0 or t >= now_ms:
            break
        missed.append(t)
    # `t` is now the first fire time from now on (or NONE): it becomes the entry after the plan.
    total_missed = len(missed)
    if len(missed) == MAX_ENUMERATED_MISSES:
        t = _first_not_missed(unbounded, missed[-1], now_ms)
        total_missed = _count_missed(unbounded, missed, t)
    policy = spec.misfire or pb.MISFIRE_FIRE_ONCE
    span = f"{total_missed} firing(s) due between {missed[0]} and {missed[-1] if total_missed == len(missed) else 'later'} (ms)"
    if policy == pb.MISFIRE_SKIP:
        return FirePlan(skipped_at=missed[0], skip_reason=f"misfire skipped: {span}", next_ms=t,
                        missed=total_missed)
    if policy == pb.MISFIRE_CATCH_UP:
        limit = spec.misfire_catch_up_limit or 1
        if trigger.max_runs:
            limit = max(0, min(limit, trigger.max_runs - runs_done))
        fires = missed[-limit:] if limit else []
        dropped = missed[:len(missed) - len(fires)]
        return FirePlan(
            fires=fires,
            skipped_at=dropped[0] if dropped else NONE,
            skip_reason=(f"misfire catch-up limit {limit}: {total_missed - len(fires)} older firing(s) skipped"
                         if dropped else ""),
            next_ms=_runs_left(trigger, t, runs_done + len(fires)),
            missed=total_missed,
        )
    return FirePlan(fires=[missed[0]], next_ms=_runs_left(trigger, t, runs_done + 1), missed=total_missed)


def _runs_left(trigger: pb.Trigger, next_ms: int, runs_after: int) -> int:
    """``next_ms`` unless ``max_runs`` is used up by ``runs_after`` runs."""
    if next_ms < 0 or (trigger.max_runs and runs_after >= trigger.max_runs):
        return NONE
    return next_ms


def _count_missed(trigger: pb.Trigger, enumerated: list[int], first_not_missed: int) -> int:
    """Missed fire times beyond the enumerated ones: exact for fixed rate, a lower bound for cron."""
    if trigger.WhichOneof("kind") == "every" and first_not_missed >= 0:
        interval = max(1, _ms(trigger.every.interval))
        return len(enumerated) + (first_not_missed - enumerated[-1]) // interval - 1
    return len(enumerated)


def _first_not_missed(trigger: pb.Trigger, after_ms: int, now_ms: int) -> int:
    """The first fire time at or after ``now_ms``, skipping a long run of missed times arithmetically."""
    kind = trigger.WhichOneof("kind")
    if kind == "every" and not trigger.every.fixed_delay:
        interval = max(1, _ms(trigger.every.interval))
        steps = max(1, -(-(now_ms - after_ms) // interval))
        return _bounded(trigger, after_ms + steps * interval, 0)
    if kind == "cron":
        return _bounded(trigger, _cron_after(trigger.cron, now_ms - 1), 0)
    return NONE
