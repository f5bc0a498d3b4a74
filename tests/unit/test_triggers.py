"""When a job fires: first and next fire times of every trigger kind, DST, and misfire plans.

All times are epoch milliseconds; nothing here reads a clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from sparkyard.master import triggers
from sparkyard.spec import parsed_cron
from sparkyard.master.triggers import (
    AFTER_RUN,
    NONE,
    FirePlan,
    NoCadence,
    after_run_ms,
    backfill_times,
    first_fire_ms,
    is_recurring,
    next_fire_ms,
    plan,
)
from sparkyard.v1 import sparkyard_pb2 as pb

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
SECOND, MINUTE, HOUR = 1000, 60_000, 3_600_000
# Monday 2026-05-04 10:00:00 UTC: on a whole minute, hour and 5-minute mark.
T0 = int(datetime(2026, 5, 4, 10, 0, tzinfo=UTC).timestamp() * 1000)
THRESHOLD = 5 * SECOND  # the default misfire threshold


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp() * 1000)


def _berlin(year: int, month: int, day: int, hour: int = 0, minute: int = 0, *, fold: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=BERLIN, fold=fold).timestamp() * 1000)


def _local(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=BERLIN)


def _cron(expr: str, tz: str = "", *, max_runs: int = 0) -> pb.Trigger:
    return pb.Trigger(cron=pb.Trigger.Cron(expr=expr, tz=tz), max_runs=max_runs)


def _every(interval_ms: int, *, fixed_delay: bool = False, max_runs: int = 0) -> pb.Trigger:
    trigger = pb.Trigger(every=pb.Trigger.Every(fixed_delay=fixed_delay), max_runs=max_runs)
    trigger.every.interval.FromMilliseconds(interval_ms)
    return trigger


def _at(ms: int) -> pb.Trigger:
    trigger = pb.Trigger()
    trigger.at.FromMilliseconds(ms)
    return trigger


def _delay(ms: int) -> pb.Trigger:
    trigger = pb.Trigger()
    trigger.delay.FromMilliseconds(ms)
    return trigger


def _window(trigger: pb.Trigger, *, start_ms: int | None = None, end_ms: int | None = None) -> pb.Trigger:
    if start_ms is not None:
        trigger.start_at.FromMilliseconds(start_ms)
    if end_ms is not None:
        trigger.end_at.FromMilliseconds(end_ms)
    return trigger


def _fires_between(trigger: pb.Trigger, start_ms: int, end_ms: int) -> list[int]:
    """Every fire time in [start_ms, end_ms), following next_fire_ms from just before the start."""
    out: list[int] = []
    t = start_ms - 1
    while True:
        t = next_fire_ms(trigger, t, 0)
        if t == NONE or t >= end_ms:
            return out
        out.append(t)
        assert len(out) < 10_000


def _berlin_day(year: int, month: int, day: int) -> tuple[int, int]:
    start = datetime(year, month, day, tzinfo=BERLIN)
    following = (start + timedelta(days=1)).replace(tzinfo=BERLIN)
    return int(start.timestamp() * 1000), int(following.timestamp() * 1000)


# -------------------------------------------------------------------------------------------- first fire


def test_now_fires_at_submission() -> None:
    assert first_fire_ms(pb.Trigger(now=True), T0) == T0


def test_unset_trigger_fires_at_submission() -> None:
    assert first_fire_ms(pb.Trigger(), T0) == T0


def test_at_fires_at_the_given_instant() -> None:
    assert first_fire_ms(_at(T0 + HOUR), T0) == T0 + HOUR


def test_at_in_the_past_still_fires_at_that_instant() -> None:
    assert first_fire_ms(_at(T0 - HOUR), T0) == T0 - HOUR


def test_delay_fires_that_long_after_submission() -> None:
    assert first_fire_ms(_delay(90 * SECOND), T0 + 7) == T0 + 7 + 90 * SECOND


def test_cron_first_fire_is_the_next_matching_time() -> None:
    assert first_fire_ms(_cron("*/5 * * * *"), T0 + 1) == T0 + 5 * MINUTE


def test_cron_first_fire_includes_a_matching_submission_instant() -> None:
    assert first_fire_ms(_cron("*/5 * * * *"), T0) == T0


def test_cron_without_zone_is_utc() -> None:
    assert first_fire_ms(_cron("0 3 * * *"), T0) == _utc(2026, 5, 5, 3, 0)


def test_cron_in_a_zone_fires_at_local_wall_time() -> None:
    # 10:00 UTC is 12:00 in Berlin (CEST); 13:00 Berlin is 11:00 UTC.
    assert first_fire_ms(_cron("0 13 * * *", "Europe/Berlin"), T0) == _utc(2026, 5, 4, 11, 0)


def test_every_first_fires_at_submission() -> None:
    assert first_fire_ms(_every(10 * SECOND), T0) == T0


def test_every_with_a_future_start_first_fires_at_start() -> None:
    assert first_fire_ms(_window(_every(10 * SECOND), start_ms=T0 + HOUR), T0) == T0 + HOUR


def test_every_with_a_past_start_first_fires_at_submission() -> None:
    assert first_fire_ms(_window(_every(10 * SECOND), start_ms=T0 - HOUR), T0) == T0


def test_cron_with_a_future_start_first_fires_at_the_first_match_from_start() -> None:
    trigger = _window(_cron("*/5 * * * *"), start_ms=T0 + HOUR + 1)
    assert first_fire_ms(trigger, T0) == T0 + HOUR + 5 * MINUTE


def test_cron_with_a_start_on_a_match_first_fires_at_start() -> None:
    assert first_fire_ms(_window(_cron("0 * * * *"), start_ms=T0 + HOUR), T0) == T0 + HOUR


def test_recurring_job_whose_first_time_is_past_its_end_never_fires() -> None:
    assert first_fire_ms(_window(_cron("0 0 1 1 *"), end_ms=T0 + HOUR), T0) == NONE


@pytest.mark.parametrize(
    ("trigger", "recurring"),
    [
        (pb.Trigger(now=True), False),
        (_at(T0), False),
        (_delay(SECOND), False),
        (_cron("* * * * *"), True),
        (_every(SECOND), True),
    ],
)
def test_only_cron_and_every_are_recurring(trigger: pb.Trigger, recurring: bool) -> None:
    assert is_recurring(trigger) is recurring


# --------------------------------------------------------------------------------------------- next: cron


def test_five_field_cron_starts_with_minutes() -> None:
    assert next_fire_ms(_cron("30 * * * *"), T0, 1) == T0 + 30 * MINUTE


def test_six_field_cron_starts_with_seconds() -> None:
    assert next_fire_ms(_cron("30 * * * * *"), T0, 1) == T0 + 30 * SECOND


def test_six_field_cron_steps_by_seconds() -> None:
    trigger = _cron("*/15 * * * * *")
    assert _fires_between(trigger, T0, T0 + MINUTE) == [T0 + s * SECOND for s in (0, 15, 30, 45)]


def test_cron_next_is_strictly_after_the_scheduled_time() -> None:
    assert next_fire_ms(_cron("*/5 * * * *"), T0, 1) == T0 + 5 * MINUTE
    assert next_fire_ms(_cron("*/5 * * * *"), T0 + 5 * MINUTE - 1, 1) == T0 + 5 * MINUTE


def test_cron_day_of_week() -> None:
    # T0 is a Monday; the next Friday 09:00 UTC is 2026-05-08.
    assert next_fire_ms(_cron("0 9 * * FRI"), T0, 1) == _utc(2026, 5, 8, 9, 0)


def test_cron_stops_after_end_at() -> None:
    trigger = _window(_cron("0 * * * *"), end_ms=T0 + 2 * HOUR)
    assert next_fire_ms(trigger, T0, 1) == T0 + HOUR
    assert next_fire_ms(trigger, T0 + HOUR, 2) == T0 + 2 * HOUR  # end_at itself is still in
    assert next_fire_ms(trigger, T0 + 2 * HOUR, 3) == NONE


def test_cron_stops_after_max_runs() -> None:
    trigger = _cron("0 * * * *", max_runs=3)
    assert next_fire_ms(trigger, T0, 2) == T0 + HOUR
    assert next_fire_ms(trigger, T0, 3) == NONE


# -------------------------------------------------------------------------------------------- cron and DST


def test_cron_in_the_spring_forward_gap_fires_once_at_the_first_instant_after_it() -> None:
    # 2026-03-29 in Berlin: 02:00 CET jumps to 03:00 CEST, so 02:30 does not exist.
    start, end = _berlin_day(2026, 3, 29)
    fires = _fires_between(_cron("30 2 * * *", "Europe/Berlin"), start, end)
    assert fires == [_berlin(2026, 3, 29, 3, 0)]
    assert _local(fires[0]).strftime("%H:%M %Z") == "03:00 CEST"


def test_cron_after_the_spring_forward_gap_is_back_at_its_wall_time() -> None:
    trigger = _cron("30 2 * * *", "Europe/Berlin")
    assert next_fire_ms(trigger, _berlin(2026, 3, 29, 3, 0), 1) == _berlin(2026, 3, 30, 2, 30)


def test_cron_at_a_time_that_exists_twice_fires_once_on_the_fall_back_day() -> None:
    # 2026-10-25 in Berlin: 03:00 CEST falls back to 02:00 CET, so 02:30 happens twice.
    start, end = _berlin_day(2026, 10, 25)
    fires = _fires_between(_cron("30 2 * * *", "Europe/Berlin"), start, end)
    assert len(fires) == 1, [_local(t).isoformat() for t in fires]
    assert _local(fires[0]).strftime("%H:%M") == "02:30"


@pytest.mark.parametrize(("day", "count"), [((2026, 3, 29), 23), ((2026, 10, 25), 25), ((2026, 6, 1), 24)])
def test_hourly_cron_fires_once_per_real_hour_of_a_berlin_day(day: tuple[int, int, int], count: int) -> None:
    start, end = _berlin_day(*day)
    fires = _fires_between(_cron("0 * * * *", "Europe/Berlin"), start, end)
    assert len(fires) == count
    assert all(b - a == HOUR for a, b in zip(fires, fires[1:]))


def test_hourly_cron_skips_the_missing_hour_on_spring_forward() -> None:
    start, end = _berlin_day(2026, 3, 29)
    hours = [_local(t).hour for t in _fires_between(_cron("0 * * * *", "Europe/Berlin"), start, end)]
    assert 2 not in hours
    assert hours[:3] == [0, 1, 3]


def test_hourly_cron_fires_the_repeated_hour_twice_on_fall_back() -> None:
    start, end = _berlin_day(2026, 10, 25)
    fires = _fires_between(_cron("0 * * * *", "Europe/Berlin"), start, end)
    assert [_local(t).hour for t in fires][:5] == [0, 1, 2, 2, 3]
    assert fires[2] == _berlin(2026, 10, 25, 2, 0, fold=0)
    assert fires[3] == _berlin(2026, 10, 25, 2, 0, fold=1)


# -------------------------------------------------------------------------------------------- next: every


def test_fixed_rate_next_is_scheduled_time_plus_interval() -> None:
    assert next_fire_ms(_every(10 * SECOND), T0, 1) == T0 + 10 * SECOND


def test_fixed_rate_does_not_drift_over_many_firings() -> None:
    trigger = _every(333)
    t = T0
    for runs in range(1, 1001):
        t = next_fire_ms(trigger, t, runs)
    assert t == T0 + 1000 * 333


def test_fixed_rate_next_does_not_depend_on_when_the_run_happened() -> None:
    # The next time follows the *scheduled* time handed in, however late the run actually was.
    assert next_fire_ms(_every(MINUTE), T0, 1) == next_fire_ms(_every(MINUTE), T0, 5) == T0 + MINUTE


def test_fixed_rate_stops_after_end_at() -> None:
    trigger = _window(_every(10 * SECOND), end_ms=T0 + 25 * SECOND)
    assert next_fire_ms(trigger, T0 + 10 * SECOND, 2) == T0 + 20 * SECOND
    assert next_fire_ms(trigger, T0 + 20 * SECOND, 3) == NONE


def test_fixed_rate_may_fire_exactly_at_end_at() -> None:
    trigger = _window(_every(10 * SECOND), end_ms=T0 + 20 * SECOND)
    assert next_fire_ms(trigger, T0 + 10 * SECOND, 2) == T0 + 20 * SECOND


def test_fixed_rate_stops_after_max_runs() -> None:
    trigger = _every(10 * SECOND, max_runs=3)
    assert next_fire_ms(trigger, T0 + 10 * SECOND, 2) == T0 + 20 * SECOND
    assert next_fire_ms(trigger, T0 + 20 * SECOND, 3) == NONE


def test_max_runs_of_zero_means_no_limit() -> None:
    assert next_fire_ms(_every(SECOND, max_runs=0), T0, 10**6) == T0 + SECOND


def test_fixed_delay_next_waits_for_the_run_to_end() -> None:
    assert next_fire_ms(_every(10 * SECOND, fixed_delay=True), T0, 1) == AFTER_RUN


def test_fixed_delay_next_is_the_end_of_the_run_plus_interval() -> None:
    trigger = _every(10 * SECOND, fixed_delay=True)
    assert after_run_ms(trigger, T0 + 37 * SECOND, 1) == T0 + 47 * SECOND


def test_fixed_delay_stops_after_max_runs() -> None:
    trigger = _every(10 * SECOND, fixed_delay=True, max_runs=2)
    assert next_fire_ms(trigger, T0, 1) == AFTER_RUN
    assert next_fire_ms(trigger, T0, 2) == NONE
    assert after_run_ms(trigger, T0 + MINUTE, 2) == NONE


def test_fixed_delay_stops_after_end_at() -> None:
    trigger = _window(_every(10 * SECOND, fixed_delay=True), end_ms=T0 + MINUTE)
    assert after_run_ms(trigger, T0 + 45 * SECOND, 1) == T0 + 55 * SECOND
    assert after_run_ms(trigger, T0 + 55 * SECOND, 2) == NONE


@pytest.mark.parametrize("trigger", [pb.Trigger(now=True), _at(T0), _delay(SECOND)], ids=["now", "at", "delay"])
def test_one_shot_trigger_has_no_next_fire(trigger: pb.Trigger) -> None:
    assert next_fire_ms(trigger, T0, 1) == NONE


# ------------------------------------------------------------------------------------------------ plan


def _job(trigger: pb.Trigger, misfire: int = pb.MISFIRE_UNSPECIFIED, limit: int = 0) -> pb.JobSpec:
    return pb.JobSpec(entrypoint="/jobs/etl.py:main", trigger=trigger, misfire=misfire,
                      misfire_catch_up_limit=limit)


EVERY_10S = _every(10 * SECOND)
LATE_95S = T0 + 95 * SECOND
# Due at T0 and handled 95 s late: a misfire, so every time before now (T0 … T0+90 s) is missed and the
# schedule continues at the first time from now on.
FIRST_NOT_MISSED = T0 + 100 * SECOND


@pytest.mark.parametrize("late_ms", [0, 1, THRESHOLD])
def test_on_time_firing_fires_once_and_schedules_the_following_time(late_ms: int) -> None:
    result = plan(_job(EVERY_10S), T0, T0 + late_ms, THRESHOLD, 0)
    assert result == FirePlan(fires=[T0], next_ms=T0 + 10 * SECOND)


def test_on_time_cron_firing_schedules_the_next_cron_time() -> None:
    result = plan(_job(_cron("*/5 * * * *")), T0, T0 + 200, THRESHOLD, 4)
    assert result == FirePlan(fires=[T0], next_ms=T0 + 5 * MINUTE)


def test_on_time_last_allowed_firing_has_no_next() -> None:
    result = plan(_job(_every(10 * SECOND, max_runs=3)), T0, T0, THRESHOLD, 2)
    assert (result.fires, result.next_ms) == ([T0], NONE)


def test_skip_policy_fires_nothing_and_records_the_missed_period() -> None:
    result = plan(_job(EVERY_10S, pb.MISFIRE_SKIP), T0, LATE_95S, THRESHOLD, 0)
    assert result.fires == []
    assert result.skipped_at == T0
    assert result.skip_reason.startswith("misfire skipped")
    assert result.next_ms == FIRST_NOT_MISSED
    assert result.missed == 10


@pytest.mark.parametrize("policy", [pb.MISFIRE_FIRE_ONCE, pb.MISFIRE_UNSPECIFIED], ids=["FIRE_ONCE", "UNSPECIFIED"])
def test_fire_once_policy_fires_one_run_at_the_due_time(policy: int) -> None:
    result = plan(_job(EVERY_10S, policy), T0, LATE_95S, THRESHOLD, 0)
    assert result.fires == [T0]
    assert result.skipped_at == NONE
    assert result.next_ms == FIRST_NOT_MISSED
    assert result.missed == 10


def test_catch_up_policy_fires_the_most_recent_missed_times_in_order() -> None:
    result = plan(_job(EVERY_10S, pb.MISFIRE_CATCH_UP, limit=3), T0, LATE_95S, THRESHOLD, 0)
    assert result.fires == [T0 + 70 * SECOND, T0 + 80 * SECOND, T0 + 90 * SECOND]
    assert result.skipped_at == T0
    assert "7 older firing(s) skipped" in result.skip_reason
    assert result.next_ms == FIRST_NOT_MISSED
    assert result.missed == 10


def test_catch_up_within_its_limit_fires_every_missed_time_and_skips_none() -> None:
    result = plan(_job(EVERY_10S, pb.MISFIRE_CATCH_UP, limit=20), T0, LATE_95S, THRESHOLD, 0)
    assert result.fires == [T0 + s * SECOND for s in range(0, 100, 10)]
    assert result.skipped_at == NONE
    assert result.next_ms == FIRST_NOT_MISSED


def test_the_first_time_not_missed_is_left_for_the_schedule_not_fired_by_the_plan() -> None:
    for policy in (pb.MISFIRE_SKIP, pb.MISFIRE_FIRE_ONCE, pb.MISFIRE_CATCH_UP):
        result = plan(_job(EVERY_10S, policy, limit=100), T0, LATE_95S, THRESHOLD, 0)
        assert FIRST_NOT_MISSED not in result.fires


@pytest.mark.parametrize(
    "trigger", [pb.Trigger(now=True), _at(T0), _delay(SECOND)], ids=["now", "at", "delay"]
)
@pytest.mark.parametrize("policy", [pb.MISFIRE_SKIP, pb.MISFIRE_FIRE_ONCE, pb.MISFIRE_CATCH_UP])
def test_one_shot_job_handled_late_still_fires_once(trigger: pb.Trigger, policy: int) -> None:
    result = plan(_job(trigger, policy, limit=3), T0, T0 + HOUR, THRESHOLD, 0)
    assert result.fires == [T0]
    assert result.next_ms == NONE


def test_fixed_delay_job_handled_late_fires_once_and_waits_for_its_run() -> None:
    result = plan(_job(_every(10 * SECOND, fixed_delay=True), pb.MISFIRE_SKIP), T0, LATE_95S, THRESHOLD, 0)
    assert result.fires == [T0]
    assert result.next_ms == AFTER_RUN


def test_late_cron_with_fire_once_resumes_at_the_first_cron_time_not_missed() -> None:
    # Every 5 minutes, handled 12 minutes late: T0, T0+5m, T0+10m are missed; T0+15m is still ahead.
    result = plan(_job(_cron("*/5 * * * *")), T0, T0 + 12 * MINUTE, THRESHOLD, 0)
    assert result.fires == [T0]
    assert result.missed == 3
    assert result.next_ms == T0 + 15 * MINUTE


def test_late_job_past_its_end_has_no_next_after_the_plan() -> None:
    trigger = _window(_every(10 * SECOND), end_ms=T0 + 30 * SECOND)
    result = plan(_job(trigger, pb.MISFIRE_CATCH_UP, limit=10), T0, LATE_95S, THRESHOLD, 0)
    assert result.fires == [T0, T0 + 10 * SECOND, T0 + 20 * SECOND, T0 + 30 * SECOND]
    assert result.next_ms == NONE


# A 100 ms job down for a day: far more missed times than plan() enumerates (MAX_ENUMERATED_MISSES).
FAST = _every(100)
DAY_LATE = T0 + 24 * HOUR + 50


def test_very_long_outage_of_a_fast_job_resumes_at_the_first_time_from_now() -> None:
    result = plan(_job(FAST, pb.MISFIRE_SKIP), T0, DAY_LATE, THRESHOLD, 0)
    assert result.fires == []
    assert result.skipped_at == T0
    assert result.next_ms == T0 + 86_400_100  # the first 100 ms step at or after now


def test_very_long_outage_resumes_at_a_time_exactly_now() -> None:
    now = T0 + 24 * HOUR + THRESHOLD
    result = plan(_job(FAST, pb.MISFIRE_SKIP), T0, now, THRESHOLD, 0)
    assert result.next_ms == now


def test_very_long_outage_reports_every_missed_time() -> None:
    # T0, T0 + 100 ms, … T0 + 86_400_000 ms were all before now: 864_001 of them.
    result = plan(_job(FAST, pb.MISFIRE_SKIP), T0, DAY_LATE, THRESHOLD, 0)
    assert result.missed == 864_001


def test_very_long_outage_with_fire_once_fires_once() -> None:
    result = plan(_job(FAST, pb.MISFIRE_FIRE_ONCE), T0, DAY_LATE, THRESHOLD, 0)
    assert result.fires == [T0]
    assert result.next_ms == T0 + 86_400_100



# ---- backfill ----------------------------------------------------------------------------------------------


def test_a_cron_backfill_lists_the_calendar_times_in_the_range_both_ends_included() -> None:
    times = backfill_times(_cron("0 * * * *", max_runs=1), T0 - 3 * HOUR, T0, limit=100)
    assert times == [T0 - 3 * HOUR, T0 - 2 * HOUR, T0 - HOUR, T0]  # max_runs bounds the schedule, not this
    assert backfill_times(_cron("0 * * * *"), T0 - 3 * HOUR + 1, T0 - 1, limit=100) == [T0 - 2 * HOUR, T0 - HOUR]


def test_a_cron_backfill_follows_its_time_zone_through_a_dst_change() -> None:
    times = backfill_times(_cron("30 2 * * *", "Europe/Berlin"), _utc(2026, 3, 28), _utc(2026, 3, 30, 12), 10)
    # 02:30 does not exist on 29 March in Berlin: that day fires at the first instant after the gap.
    assert [_local(t).strftime("%d %H:%M") for t in times] == ["28 02:30", "29 03:00", "30 02:30"]


def test_a_fixed_rate_backfill_counts_intervals_from_the_start_of_the_range() -> None:
    assert backfill_times(_every(15 * MINUTE), T0, T0 + HOUR, limit=100) == [T0 + i * 15 * MINUTE for i in range(5)]


def test_a_backfill_refuses_a_range_past_its_limit_and_triggers_without_a_cadence() -> None:
    with pytest.raises(ValueError, match="more than 3 fire times"):
        backfill_times(_every(MINUTE), T0, T0 + HOUR, limit=3)
    for trigger in (_every(MINUTE, fixed_delay=True), _at(T0)):
        with pytest.raises(NoCadence, match="backfill needs a cron or fixed-rate job"):
            backfill_times(trigger, T0, T0 + HOUR, limit=3)


def test_parsed_cron_expressions_are_kept_but_not_one_with_a_random_field() -> None:
    """croniter draws an ``R`` field when it parses: keeping that parse would give every job with the same
    expression the same draw for the life of the master."""
    parsed_cron.cache_clear()
    for expr in ("17 3 * * *", "17 3 * * *", "0 0 * * FRI"):
        triggers._cron_after(pb.Trigger.Cron(expr=expr), 1_700_000_000_000)
    assert parsed_cron.cache_info().currsize == 2
    nxt = triggers._cron_after(pb.Trigger.Cron(expr="R 3 * * *"), 1_700_000_000_000)
    assert parsed_cron.cache_info().currsize == 2 and nxt > 1_700_000_000_000


def test_the_jobs_of_one_expression_due_together_share_one_fire_time_computation() -> None:
    """Every ``0 0 * * *`` job planned at midnight needs the same next time: computed once, then kept. An
    expression with a random field is drawn afresh each time (a kept answer would repeat one draw)."""
    triggers._cron_next.cache_clear()
    times = {triggers._cron_after(pb.Trigger.Cron(expr="0 0 * * *", tz="Europe/Berlin"), 1_700_000_000_000)
             for _ in range(100)}
    assert len(times) == 1 and triggers._cron_next.cache_info().misses == 1
    draws = {triggers._cron_after(pb.Trigger.Cron(expr="R R * * *"), 1_700_000_000_000) for _ in range(20)}
    assert len(draws) > 1 and triggers._cron_next.cache_info().currsize == 1


def test_jobs_of_one_expression_submitted_in_the_same_second_share_one_computation_and_stay_exact() -> None:
    """A bulk submit's jobs come milliseconds apart: the first cron time after each is the one after the
    second's start (cron times are whole seconds), including for a moment just before a fire time."""
    triggers._cron_next.cache_clear()
    every_5s = pb.Trigger.Cron(expr="*/5 * * * * *")
    second = 1_700_000_004_000  # a fire time is at +1 s
    assert {triggers._cron_after(every_5s, second + ms) for ms in (0, 1, 500, 999)} == {second + 1_000}
    assert triggers._cron_next.cache_info().misses == 1
    assert triggers._cron_after(every_5s, second + 1_000) == second + 6_000  # strictly after, not at
    assert triggers._cron_after(every_5s, second + 999) == second + 1_000
