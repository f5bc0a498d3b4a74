"""Values protobuf decodes but Sparkyard refuses, each named by its field's path; and how errors quote them."""

from __future__ import annotations

from urllib.parse import quote as percent_quote

import pytest

from sparkyard import wellformed
from sparkyard.errors import QUOTE_CHARS, clip, quote
from sparkyard.master.convert import job_to_proto
from sparkyard.master.records import JobRecord
from sparkyard.states import JobState
from sparkyard.v1 import sparkyard_pb2 as pb


def refusal(message: object) -> str:
    with pytest.raises(wellformed.MalformedField) as err:
        wellformed.check(message)  # type: ignore[arg-type]
    return str(err.value)


def test_a_well_formed_spec_passes() -> None:
    spec = pb.JobSpec(entrypoint="m:f", runner=pb.RUNNER_SESSION, misfire=pb.MISFIRE_SKIP)
    spec.trigger.every.interval.FromSeconds(10)
    spec.trigger.end_at.FromSeconds(253_402_300_799)
    spec.retry.multiplier = 2.5
    wellformed.check(spec)


def test_an_unknown_enum_number_is_refused_naming_the_field_and_the_known_names() -> None:
    text = refusal(pb.JobSpec(runner=42))  # type: ignore[arg-type]
    assert text.startswith("runner: 42 is not a Runner") and "RUNNER_SESSION" in text


def test_a_nested_enum_in_a_repeated_message_is_named_with_its_index() -> None:
    reports = pb.Reports(results=[pb.TaskResult(outcome=pb.ATTEMPT_SUCCEEDED), pb.TaskResult(outcome=77)])  # type: ignore[list-item]
    assert refusal(pb.WorkerMessage(reports=reports)).startswith("reports.results[1].outcome: 77")


@pytest.mark.parametrize("seconds", [253_402_300_800, -62_135_596_801])
def test_a_timestamp_outside_years_1_to_9999_is_refused(seconds: int) -> None:
    spec = pb.JobSpec()
    spec.trigger.at.seconds = seconds
    assert refusal(spec).startswith("trigger.at: ")


def test_timestamp_nanos_out_of_range_are_refused() -> None:
    spec = pb.JobSpec()
    spec.trigger.start_at.nanos = -1
    assert refusal(spec).startswith("trigger.start_at: ")


@pytest.mark.parametrize(("seconds", "nanos"), [(315_576_000_001, 0), (5, -1), (-5, 1), (0, 1_000_000_000)])
def test_an_ill_formed_duration_is_refused(seconds: int, nanos: int) -> None:
    spec = pb.JobSpec()
    spec.timeout.seconds, spec.timeout.nanos = seconds, nanos
    assert refusal(spec).startswith("timeout: ")


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_float_that_is_not_finite_is_refused(value: float) -> None:
    assert refusal(pb.JobSpec(retry=pb.RetryPolicy(multiplier=value))).startswith("retry.multiplier: ")


def test_a_quoted_long_value_is_cut_and_says_its_length() -> None:
    text = quote("x" * 100_000)
    assert len(text) < QUOTE_CHARS + 40 and text.endswith("(100,000 characters)")
    assert quote("short") == "'short'"


def test_a_long_message_is_clipped() -> None:
    assert len(clip("y" * 50_000)) < 4100 and clip("ok") == "ok"


# gRPC's grpc-message header leaves printable ASCII but '%' as it is and percent-encodes every other byte.
GRPC_UNRESERVED = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


@pytest.mark.parametrize("char", ["y", "é", "%", "\U0001f600"])
def test_a_clipped_message_fits_the_limit_as_grpc_encodes_it(char: str) -> None:
    clipped = clip(char * 50_000, limit=4000)
    assert len(percent_quote(clipped, safe=GRPC_UNRESERVED)) <= 4000 and "50,000 characters" in clipped
    assert clip(char * 100) == char * 100


def test_a_stored_time_past_year_9999_leaves_the_field_unset_instead_of_failing() -> None:
    job = JobRecord(id="j1", spec=pb.JobSpec(entrypoint="m:f"), state=JobState.ACTIVE, created_ms=1000,
                    updated_ms=1000, next_fire_ms=10**18, runs=0, last_run_id="")
    out = job_to_proto(job)
    assert not out.HasField("next_fire_at") and out.created_at.ToMilliseconds() == 1000
