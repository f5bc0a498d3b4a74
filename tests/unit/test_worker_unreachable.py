"""A worker that cannot reach its master (issue 25 item 5) says so in one line, not the five lines of a gRPC
error's repr with its debug string; and not once a second for ever: the first failure at once, then at most
one line a minute while it retries every second, and the registration that ends it says how long it lasted."""

from __future__ import annotations

import asyncio
import logging

import grpc

from sparkyard.clock import FakeClock
from sparkyard.worker.unreachable import UnreachableLog, unreachable_text


def test_a_grpc_failure_is_one_line_with_its_code_and_details() -> None:
    exc = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                               "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1:\nrefused",
                               debug_error_string="UNKNOWN:Error received from peer {grpc_status:14, ...}")
    text = unreachable_text(exc)
    assert text == "UNAVAILABLE: failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: refused"
    assert "debug_error_string" not in text and "\n" not in text


def test_other_failures_are_named() -> None:
    assert unreachable_text(asyncio.TimeoutError()) == "no answer to the registration in time"
    assert unreachable_text(OSError("boom")) == "OSError: boom"


def test_a_second_a_retry_for_three_minutes_says_so_four_times_then_once_when_registered(caplog) -> None:
    clock = FakeClock(start=1_700_000_000.0)  # 22:13:20 UTC
    logger = logging.getLogger("test.unreachable")
    notes = UnreachableLog(clock, logger)
    with caplog.at_level(logging.DEBUG, logger.name):
        for _ in range(181):  # one try a second, 0 s to 180 s
            notes.failed("127.0.0.1:1", "UNAVAILABLE: refused", 1.0)
            clock.advance(1.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "cannot reach master 127.0.0.1:1 (UNAVAILABLE: refused); not registered, retrying every 1.0s or so "
        "(said again at most once a minute)",
        "still cannot reach master 127.0.0.1:1 after 61 tries (since 22:13:20 UTC); not registered: UNAVAILABLE: "
        "refused",
        "still cannot reach master 127.0.0.1:1 after 121 tries (since 22:13:20 UTC); not registered: UNAVAILABLE: "
        "refused",
        "still cannot reach master 127.0.0.1:1 after 181 tries (since 22:13:20 UTC); not registered: UNAVAILABLE: "
        "refused",
    ]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 181 - 4  # every other try, for --log-level
    assert notes.registered() == " after 181 failed tries (since 22:13:20 UTC)"
    assert notes.registered() == ""  # said once; the next outage starts its own count
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger.name):
        notes.failed("127.0.0.1:1", "UNAVAILABLE: refused", 0.2)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]  # a new outage is said at once
