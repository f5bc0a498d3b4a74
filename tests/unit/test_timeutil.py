"""Durations and instants as users type and read them."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from sparkyard.timeutil import format_duration, parse_duration, parse_instant, rfc3339, rfc3339_ms

# ---------------------------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("250ms", 0.25),
        ("0ms", 0.0),
        ("10s", 10.0),
        ("1.5s", 1.5),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("2d", 172_800.0),
        ("1h30m", 5400.0),
        ("1m30s", 90.0),
        ("1d2h3m4s5ms", 93_784.005),
        ("1s500ms", 1.5),
        ("10S", 10.0),  # case-insensitive
        ("  5m ", 300.0),  # surrounding blanks ignored
    ],
)
def test_parse_duration_reads_unit_suffixes(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "seconds"), [("0", 0.0), ("1", 1.0), ("1.5", 1.5), ("90", 90.0), ("0.1", 0.1)])
def test_parse_duration_reads_a_bare_number_as_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "   ", "abc", "5x", "-1s", "-1", "1m30", "s", "ms", "1.5.5s", "5 s", "h1",
                                  "nan", "inf"])
def test_parse_duration_refuses_malformed_text_naming_the_field(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_duration(text, field="trigger.every")
    assert str(err.value).startswith("trigger.every: ")


@pytest.mark.parametrize("text", ["abc", "5x"])
def test_parse_duration_error_names_the_text_and_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_duration(text, field="timeout")
    assert repr(text) in str(err.value)
    assert "1h30m" in str(err.value)


def test_parse_duration_error_for_empty_text_says_it_is_empty() -> None:
    with pytest.raises(ValueError, match="^timeout: empty duration"):
        parse_duration("", field="timeout")


def test_parse_duration_refuses_a_negative_bare_number() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        parse_duration("-1", field="timeout")


def test_parse_duration_names_duration_when_no_field_is_given() -> None:
    with pytest.raises(ValueError, match="^duration: "):
        parse_duration("abc")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0ms"),
        (0.25, "250ms"),
        (0.001, "1ms"),
        (1, "1s"),
        (1.5, "1.5s"),
        (59, "59s"),
        (60, "1m"),
        (90, "1m30s"),
        (3600, "1h"),
        (5400, "1h30m"),
        (3661, "1h1m1s"),
        (86_400, "1d"),
        (90_061, "1d1h1m1s"),
    ],
)
def test_format_duration_prints_the_short_form(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [0.25, 1, 1.5, 90, 5400, 3661, 90_061])
def test_format_duration_output_parses_back_to_the_same_duration(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


def test_format_duration_rounds_just_under_a_second_to_one_second() -> None:
    assert format_duration(0.9996) == "1s"


# ------------------------------------------------------------------------------------------------ instants

INSTANT = datetime(2026, 11, 22, 3, 0, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-11-22T03:00:00Z", INSTANT),
        ("2026-11-22T03:00:00z", INSTANT),
        ("2026-11-22T03:00:00+00:00", INSTANT),
        ("2026-11-22T04:00:00+01:00", INSTANT),
        ("2026-11-22 04:00+01:00", INSTANT),
        ("2026-11-21T21:30:00-05:30", INSTANT),
        ("2026-11-22T03:00:00.250Z", INSTANT + 0.25),
        ("  2026-11-22T03:00:00Z  ", INSTANT),
    ],
)
def test_parse_instant_reads_utc_and_offsets(text: str, seconds: float) -> None:
    assert parse_instant(text) == seconds


@pytest.mark.parametrize("text", ["2026-11-22T03:00:00", "2026-11-22 03:00", "2026-11-22"])
def test_parse_instant_refuses_a_time_without_an_offset(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_instant(text, field="trigger.at")
    message = str(err.value)
    assert message.startswith("trigger.at: ")
    assert "offset" in message
    assert repr(text) in message


@pytest.mark.parametrize("text", ["", "tomorrow", "2026-13-01T00:00:00Z", "2026-11-22T25:00:00Z"])
def test_parse_instant_refuses_a_non_iso_text_naming_the_field(text: str) -> None:
    with pytest.raises(ValueError, match="^trigger.at: .*ISO 8601"):
        parse_instant(text, field="trigger.at")


@pytest.mark.parametrize(
    ("epoch_ms", "text"),
    [
        (1732262400123, "2024-11-22T08:00:00.123Z"),
        (1732262400000, "2024-11-22T08:00:00.000Z"),
        (1732262400999, "2024-11-22T08:00:00.999Z"),
        (0, "1970-01-01T00:00:00.000Z"),
        (1, "1970-01-01T00:00:00.001Z"),
        # ms / 1000 is not exact in binary: a float split of 1732262400001 gives .000 instead of .001
        (1732262400001, "2024-11-22T08:00:00.001Z"),
        (1732262400007, "2024-11-22T08:00:00.007Z"),
        (253402300799999, "9999-12-31T23:59:59.999Z"),
    ],
)
def test_rfc3339_ms_prints_exact_milliseconds_in_utc(epoch_ms: int, text: str) -> None:
    assert rfc3339_ms(epoch_ms) == text


def test_rfc3339_ms_is_exact_for_every_millisecond_of_a_second() -> None:
    base = 1732262400000
    assert [rfc3339_ms(base + ms)[-5:] for ms in range(1000)] == [f".{ms:03d}Z" for ms in range(1000)]


def test_rfc3339_rounds_epoch_seconds_to_the_nearest_millisecond() -> None:
    assert rfc3339(1732262400.123) == "2024-11-22T08:00:00.123Z"
    assert rfc3339(1732262400.0004) == "2024-11-22T08:00:00.000Z"


def test_parse_instant_reads_back_what_rfc3339_ms_prints() -> None:
    assert parse_instant(rfc3339_ms(1732262400123)) * 1000 == pytest.approx(1732262400123)
