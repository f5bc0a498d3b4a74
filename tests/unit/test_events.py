"""The master's event dispatcher: wired once, every subscriber told in order, one failure hides nothing."""

from __future__ import annotations

import logging

import pytest

from sparkyard.master.events import Events, JobEnded, RunEnded, SealedError, WorkReady
from sparkyard.states import RunState


def test_subscribers_of_a_kind_are_told_in_subscription_order_and_other_kinds_are_not() -> None:
    events = Events()
    told: list[str] = []
    events.subscribe(RunEnded, lambda e: told.append(f"a:{e.run_id}"))
    events.subscribe(RunEnded, lambda e: told.append(f"b:{e.state.value}"))
    events.subscribe(JobEnded, lambda e: told.append(f"job:{e.job_id}"))
    events.seal()
    events.publish(RunEnded("j1.5", RunState.FAILED))
    assert told == ["a:j1.5", "b:FAILED"]
    events.publish(WorkReady())  # nobody subscribed: nothing happens
    assert told == ["a:j1.5", "b:FAILED"]


def test_a_failing_subscriber_is_logged_and_the_next_one_is_still_told(caplog: pytest.LogCaptureFixture) -> None:
    events = Events()
    told: list[RunEnded] = []

    def broken(_: RunEnded) -> None:
        raise RuntimeError("boom")

    events.subscribe(RunEnded, broken)
    events.subscribe(RunEnded, told.append)
    events.seal()
    with caplog.at_level(logging.ERROR):
        events.publish(RunEnded("j1.5", RunState.SUCCEEDED))
    assert told == [RunEnded("j1.5", RunState.SUCCEEDED)]
    assert "boom" in caplog.text and "broken" in caplog.text


def test_subscribing_after_the_master_was_assembled_is_refused() -> None:
    events = Events()
    events.seal()
    with pytest.raises(SealedError, match="RunEnded"):
        events.subscribe(RunEnded, lambda e: None)


def test_a_run_ended_event_names_its_job() -> None:
    assert RunEnded("j00000000000000000000a.1795713327082", RunState.SUCCEEDED).job_id == "j00000000000000000000a"
