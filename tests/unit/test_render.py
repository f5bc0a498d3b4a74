"""The CLI's JSON form of API messages: RFC 3339 times, bare enum names, zeros kept, results parsed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkyard.protojson import to_dict
from sparkyard.v1 import sparkyard_pb2 as pb

MS = 1732262400123  # 2024-11-22T08:00:00.123Z


def _run() -> pb.Run:
    run = pb.Run(id="r1", job_id="j1", state=pb.RUN_SUCCEEDED, task_count=2, tasks_succeeded=2)
    run.scheduled_at.FromMilliseconds(MS)
    run.fired_at.FromMilliseconds(MS + 877)
    task = run.tasks.add(id="t0", run_id="r1", index=0, state=pb.TASK_SUCCEEDED, result_json='{"rows": 3}')
    task.inputs.add(value="s3://b/part-0", mark="db1")
    task.inputs.add(value="s3://b/part-1")
    attempt = task.attempts.add(number=1, worker="w1", fencing_token=7, state=pb.ATTEMPT_SUCCEEDED,
                                result_json='{"rows": 3}')
    attempt.started_at.FromMilliseconds(MS + 1000)
    run.tasks.add(id="t1", run_id="r1", index=1, state=pb.TASK_DEAD, error="boom")
    return run


# ------------------------------------------------------------------------------------------------ timestamps


def test_timestamps_are_rfc3339_utc_with_milliseconds() -> None:
    out = to_dict(_run())
    assert out["scheduled_at"] == "2024-11-22T08:00:00.123Z"
    assert out["fired_at"] == "2024-11-22T08:00:01.000Z"


def test_unset_timestamps_are_none() -> None:
    out = to_dict(_run())
    assert out["started_at"] is None
    assert out["finished_at"] is None


def test_sub_millisecond_precision_is_dropped() -> None:
    run = pb.Run()
    run.scheduled_at.FromNanoseconds(MS * 1_000_000 + 999_999)
    assert to_dict(run)["scheduled_at"] == "2024-11-22T08:00:00.123Z"


def test_durations_are_seconds() -> None:
    spec = pb.JobSpec()
    spec.timeout.FromMilliseconds(1500)
    assert to_dict(spec)["timeout"] == 1.5


# ----------------------------------------------------------------------------------------------------- enums


@pytest.mark.parametrize(
    ("message", "field", "name"),
    [
        (pb.Job(state=pb.JOB_ACTIVE), "state", "ACTIVE"),
        (pb.Job(state=pb.JOB_CANCELLED), "state", "CANCELLED"),
        (pb.Run(state=pb.RUN_SUCCEEDED), "state", "SUCCEEDED"),
        (pb.Run(state=pb.RUN_SKIPPED), "state", "SKIPPED"),
        (pb.Task(state=pb.TASK_LEASED), "state", "LEASED"),
        (pb.Attempt(state=pb.ATTEMPT_TIMED_OUT), "state", "TIMED_OUT"),
        (pb.TaskResult(outcome=pb.ATTEMPT_RELEASED), "outcome", "RELEASED"),
        (pb.JobSpec(runner=pb.RUNNER_SUBMIT), "runner", "SUBMIT"),
        (pb.JobSpec(routing=pb.ROUTING_CONSISTENT_HASH), "routing", "CONSISTENT_HASH"),
        (pb.JobSpec(misfire=pb.MISFIRE_CATCH_UP), "misfire", "CATCH_UP"),
        (pb.JobSpec(overlap=pb.OVERLAP_FORBID), "overlap", "FORBID"),
        (pb.WorkerInfo(default_runner=pb.RUNNER_SESSION), "default_runner", "SESSION"),
        (pb.Run(), "state", "UNSPECIFIED"),
    ],
)
def test_enum_values_are_printed_without_their_type_prefix(message: Any, field: str, name: str) -> None:
    assert to_dict(message)[field] == name


@pytest.mark.parametrize("state", [s for s in pb.RunState.keys() if s != "RUN_STATE_UNSPECIFIED"])
def test_every_run_state_drops_exactly_the_run_prefix(state: str) -> None:
    assert to_dict(pb.Run(state=pb.RunState.Value(state)))["state"] == state.removeprefix("RUN_")


def test_an_enum_number_unknown_to_the_client_is_printed_as_the_number() -> None:
    run = pb.Run()
    run.state = 99  # proto3 enums are open: a newer master may send this
    assert to_dict(run)["state"] == "99"


# ----------------------------------------------------------------------------------------------------- zeros


def test_zero_ints_are_present() -> None:
    out = to_dict(pb.WorkerInfo(id="w1", slots=2, free_slots=0))
    assert out["free_slots"] == 0
    assert out["pid"] == 0


def test_every_field_of_a_message_is_present() -> None:
    out = to_dict(pb.WorkerInfo())
    assert set(out) == {f.name for f in pb.WorkerInfo.DESCRIPTOR.fields}


def test_empty_strings_and_false_are_present() -> None:
    out = to_dict(pb.WorkerInfo())
    assert (out["host"], out["alive"], out["draining"]) == ("", False, False)


def test_unset_sub_message_is_none() -> None:
    assert to_dict(pb.Job(id="j1"))["spec"] is None


def test_a_oneof_s_scalars_appear_only_when_set_and_maps_and_lists_whole() -> None:
    spec = pb.JobSpec(conf={"a": "1"}, args=["x", "y"])
    spec.trigger.every.interval.FromSeconds(60)
    out = to_dict(spec)
    assert out["trigger"]["every"]["interval"] == 60.0 and out["trigger"]["cron"] is None
    assert "now" not in out["trigger"] and "manual" not in out["trigger"]
    assert (out["conf"], out["args"]) == ({"a": "1"}, ["x", "y"])
    assert to_dict(pb.Trigger(now=True))["now"] is True


# ---------------------------------------------------------------------------------------------------- result


def test_result_json_is_parsed_into_result() -> None:
    out = to_dict(_run())
    task = out["tasks"][0]
    assert task["result"] == {"rows": 3}
    assert "result_json" not in task


def test_result_of_an_attempt_is_parsed_too() -> None:
    attempt = to_dict(_run())["tasks"][0]["attempts"][0]
    assert attempt["result"] == {"rows": 3}
    assert "result_json" not in attempt


def test_empty_result_json_is_a_none_result() -> None:
    task = to_dict(_run())["tasks"][1]
    assert task["result"] is None


@pytest.mark.parametrize(("text", "result"), [("3", 3), ('"done"', "done"), ("[1, 2]", [1, 2]), ("null", None)])
def test_any_json_value_is_a_result(text: str, result: Any) -> None:
    assert to_dict(pb.Task(result_json=text))["result"] == result


def test_result_json_that_is_not_json_is_kept_as_text() -> None:
    assert to_dict(pb.Task(result_json="not {json"))["result"] == "not {json"


# ------------------------------------------------------------------------------------ maps and repeated fields


def test_string_maps_are_dicts() -> None:
    out = to_dict(pb.WorkerInfo(labels={"zone": "eu", "gpu": "1"}))
    assert out["labels"] == {"zone": "eu", "gpu": "1"}


def test_empty_map_is_an_empty_dict() -> None:
    assert to_dict(pb.WorkerInfo())["labels"] == {}


def test_integer_maps_keep_zero_values() -> None:
    out = to_dict(pb.StatusResponse(ready_by_group={"default": 0, "etl": 3}))
    assert out["ready_by_group"] == {"default": 0, "etl": 3}


def test_repeated_scalars_are_lists() -> None:
    assert to_dict(pb.WorkerInfo(tasks=["t1", "t2"]))["tasks"] == ["t1", "t2"]
    assert to_dict(pb.WorkerInfo())["tasks"] == []


def test_repeated_messages_are_lists_of_dicts() -> None:
    out = to_dict(_run())
    assert [t["id"] for t in out["tasks"]] == ["t0", "t1"]
    assert out["tasks"][0]["inputs"] == [{"value": "s3://b/part-0", "mark": "db1"},
                                         {"value": "s3://b/part-1", "mark": ""}]
    assert out["tasks"][1]["state"] == "DEAD"


def test_nested_messages_follow_the_same_conventions() -> None:
    attempt = to_dict(_run())["tasks"][0]["attempts"][0]
    assert attempt["state"] == "SUCCEEDED"
    assert attempt["started_at"] == "2024-11-22T08:00:01.123Z"
    assert attempt["finished_at"] is None
    assert attempt["fencing_token"] == 7


def test_spec_maps_and_lists_are_rendered() -> None:
    spec = pb.JobSpec(args=["--day", "1"], conf={"spark.x": "1"}, env={"A": "b"}, py_files=[])
    out = to_dict(spec)
    assert (out["args"], out["conf"], out["env"], out["py_files"]) == (["--day", "1"], {"spark.x": "1"},
                                                                       {"A": "b"}, [])


def test_bytes_are_decoded_as_text() -> None:
    assert to_dict(pb.LogChunk(data=b"line 1\n", offset=0))["data"] == "line 1\n"


def test_the_chosen_trigger_kind_is_rendered() -> None:
    trigger = to_dict(pb.Trigger(cron=pb.Trigger.Cron(expr="0 * * * *", tz="Europe/Berlin")))
    assert trigger["cron"] == {"expr": "0 * * * *", "tz": "Europe/Berlin"}


def test_output_is_json_serialisable() -> None:
    text = json.dumps(to_dict(_run()))
    assert json.loads(text)["scheduled_at"] == "2024-11-22T08:00:00.123Z"


def test_a_workers_readiness_is_named_without_its_prefix_as_every_enum_is() -> None:
    """docs/console.md: enum names without their prefix; `workers --json` gave READINESS_READY."""
    worker = pb.WorkerInfo(id="w1", readiness=pb.READINESS_READY)
    assert to_dict(worker)["readiness"] == "READY"
    assert to_dict(pb.WorkerInfo(id="w2", readiness=pb.READINESS_DEGRADED))["readiness"] == "DEGRADED"


@pytest.mark.parametrize("terminal", [True, False])
def test_json_is_indented_for_a_terminal_and_one_line_for_a_pipe(terminal: bool, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from sparkyard.cli import render

    monkeypatch.setattr("sys.stdout.isatty", lambda: terminal)
    render.print_json(to_dict(_run()))
    text = capsys.readouterr().out
    assert json.loads(text) == to_dict(_run())
    lines = text.splitlines()
    assert (len(lines) > 1 and lines[1].startswith('  "id": ')) if terminal else lines == [json.dumps(
        to_dict(_run()), separators=(",", ":"))]
