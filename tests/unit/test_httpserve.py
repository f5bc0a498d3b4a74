"""The HTTP endpoint of masters and workers: its token check, its port, and a clear error for an address
it cannot serve."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from aiohttp import web

from sparkyard.httpserve import HttpEndpoint, HttpStartError, metrics_response


async def _page(request: web.Request) -> web.Response:
    return metrics_response(b"sparkyard_up 1\n")


async def _get(url: str, token: str = "") -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as reply:
        return reply.status, await reply.text()


def test_with_a_token_every_route_but_healthz_wants_it() -> None:
    async def scenario() -> None:
        endpoint = HttpEndpoint("127.0.0.1:0", {"/metrics": _page}, ["s3cret", ""])
        await endpoint.start()
        try:
            base = f"http://127.0.0.1:{endpoint.port}"
            assert endpoint.port > 0
            assert (await _get(f"{base}/metrics"))[0] == 401
            assert (await _get(f"{base}/metrics", "wrong"))[0] == 401
            assert await _get(f"{base}/metrics", "s3cret") == (200, "sparkyard_up 1\n")
            assert await _get(f"{base}/healthz") == (200, "ok\n")
        finally:
            await endpoint.stop()

    asyncio.run(scenario())


def test_without_tokens_the_routes_are_open() -> None:
    async def scenario() -> None:
        endpoint = HttpEndpoint("127.0.0.1:0", {"/metrics": _page}, [""])
        await endpoint.start()
        try:
            assert (await _get(f"http://127.0.0.1:{endpoint.port}/metrics"))[0] == 200
        finally:
            await endpoint.stop()

    asyncio.run(scenario())


def test_an_address_in_use_is_a_clear_error() -> None:
    async def scenario() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(HttpStartError, match=f"cannot serve http on 127.0.0.1:{port}"):
                await HttpEndpoint(f"127.0.0.1:{port}", {"/metrics": _page}).start()

    asyncio.run(scenario())
