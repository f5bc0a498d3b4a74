"""A warm driver's socket as the worker reads it: a JSON message a line, however the bytes arrive
(worker/runner/driver_process.py ``_Channel``)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from sparkyard.worker.runner import driver_process
from sparkyard.worker.runner.driver_process import _Channel


async def _channel(fail_on: str = "") -> tuple[_Channel, list[dict[str, Any]], socket.socket]:
    ours, theirs = socket.socketpair()
    messages: list[dict[str, Any]] = []

    def handle(message: dict[str, Any]) -> None:
        if message.get("op") == fail_on:
            raise RuntimeError("handler failed")
        messages.append(message)

    channel = _Channel(1, handle)
    await asyncio.get_running_loop().create_unix_connection(lambda: channel, sock=ours)
    return channel, messages, theirs


async def _until(condition: Any) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.01)


def test_messages_split_and_joined_across_reads_arrive_whole_and_in_order() -> None:
    async def main() -> None:
        channel, messages, theirs = await _channel()
        sent = [{"op": "done", "id": f"t{i}", "result_json": "x" * (i * 1000)} for i in range(40)]
        data = b"".join(json.dumps(m).encode() + b"\n" for m in sent)

        def send() -> None:  # pieces that cut lines anywhere, several lines in some; blocks while the loop reads
            for start in range(0, len(data), 777):
                theirs.sendall(data[start:start + 777])

        await asyncio.to_thread(send)
        await _until(lambda: len(messages) == len(sent))
        assert messages == sent
        theirs.close()
        assert await asyncio.wait_for(channel.closed, 10) is None

    asyncio.run(main())


def test_a_line_that_is_not_json_breaks_the_channel_and_nothing_after_it_is_handed_on(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        channel, messages, theirs = await _channel()
        theirs.sendall(b'{"op": "ready"}\nnot json\n{"op": "done"}\n')
        await asyncio.wait_for(channel.closed, 10)
        assert messages == [{"op": "ready"}]
        theirs.close()

    asyncio.run(main())
    assert "session driver 1: broken channel" in caplog.text


@pytest.mark.parametrize("ended", [False, True])
def test_a_message_over_the_limit_breaks_the_channel_whether_or_not_its_end_came_in_the_same_read(
        ended: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(driver_process, "MAX_MESSAGE_BYTES", 1000)

    async def main() -> None:
        channel, messages, theirs = await _channel()
        theirs.sendall(b'{"op": "ready"}\n{"op": "done", "result_json": "' + b"x" * 2000
                       + (b'"}\n{"op": "done"}\n' if ended else b""))
        await asyncio.wait_for(channel.closed, 10)
        assert messages == [{"op": "ready"}]
        theirs.close()

    asyncio.run(main())
    assert "a message over 1000 bytes" in caplog.text


def test_a_message_its_handler_fails_on_breaks_the_channel(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        channel, messages, theirs = await _channel(fail_on="done")
        theirs.sendall(b'{"op": "ready"}\n{"op": "done"}\n{"op": "ready"}\n')
        await asyncio.wait_for(channel.closed, 10)
        assert messages == [{"op": "ready"}]
        theirs.close()

    asyncio.run(main())
    assert "its 'done' message could not be handled" in caplog.text and "RuntimeError: handler failed" in caplog.text
