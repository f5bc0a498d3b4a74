"""A worker that cannot reach its master says so in one line per retry (issue 25 item 5), not the five lines
of a gRPC error's repr with its debug string."""

from __future__ import annotations

import asyncio

import grpc

from sparkyard.worker.master_link import unreachable_text


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
