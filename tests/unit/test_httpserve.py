"""The HTTP endpoint of masters and workers: its token check, its port, and a clear error for an address
it cannot serve."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from sparkyard.httpserve import MAY_ACT, Access, HttpEndpoint, Route, metrics_response
from sparkyard.startup import StartupError


async def _page(request: web.Request) -> web.Response:
    return metrics_response(b"sparkyard_up 1\n")


async def _get(url: str, token: str = "") -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as reply:
        return reply.status, await reply.text()


def test_with_a_token_every_route_but_healthz_wants_it() -> None:
    async def scenario() -> None:
        endpoint = HttpEndpoint("127.0.0.1:0", [Route("GET", "/metrics", _page, Access.READ)], admin="s3cret")
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
        endpoint = HttpEndpoint("127.0.0.1:0", [Route("GET", "/metrics", _page, Access.READ)])
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
            with pytest.raises(StartupError, match=f"cannot serve http on 127.0.0.1:{port}: .* by pid {os.getpid()} "):
                await HttpEndpoint(f"127.0.0.1:{port}", [Route("GET", "/metrics", _page, Access.READ)]).start()

    asyncio.run(scenario())


def test_static_files_are_public_and_actions_want_the_token(tmp_path: Path) -> None:
    (tmp_path / "app.js").write_text("console.log(1)\n")

    async def act(request: web.Request) -> web.Response:
        return web.json_response({"done": True})

    async def scenario() -> None:
        endpoint = HttpEndpoint("127.0.0.1:0", [Route("POST", "/api/act", act, Access.ACT),
                                                Route("GET", "/api/look", act, Access.READ)],
                                admin="s3cret", viewer="v1ewer", static={"/static": tmp_path})
        await endpoint.start()
        base = f"http://127.0.0.1:{endpoint.port}"
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{base}/static/app.js") as reply:
                    assert reply.status == 200 and await reply.text() == "console.log(1)\n"
                    assert "script-src 'self'" in reply.headers["Content-Security-Policy"]
                async with session.post(f"{base}/api/act") as reply:
                    assert reply.status == 401
                    assert "frame-ancestors 'none'" in reply.headers["Content-Security-Policy"]
                async with session.post(f"{base}/api/act", headers={"Authorization": "Bearer s3cret"}) as reply:
                    assert reply.status == 200 and await reply.json() == {"done": True}
                async with session.get(f"{base}/api/act", headers={"Authorization": "Bearer s3cret"}) as reply:
                    assert reply.status == 405  # a route answers only its own method
                viewer = {"Authorization": "Bearer v1ewer"}
                async with session.post(f"{base}/api/act", headers=viewer) as reply:
                    assert reply.status == 403 and "needs the admin role" in await reply.text()
                async with session.get(f"{base}/api/look", headers=viewer) as reply:
                    assert reply.status == 200  # a viewer may read
        finally:
            await endpoint.stop()

    asyncio.run(scenario())


def test_a_handler_learns_whether_its_caller_may_act() -> None:
    """The console disables its actions for a viewer; it asks the handler of /api/status, which reads this."""

    async def who(request: web.Request) -> web.Response:
        return web.json_response({"may_act": request.get(MAY_ACT, True)})

    async def may_act(endpoint: HttpEndpoint, token: str) -> bool:
        status, text = await _get(f"http://127.0.0.1:{endpoint.port}/api/who", token)
        assert status == 200, text
        return bool(json.loads(text)["may_act"])

    async def scenario() -> None:
        guarded = HttpEndpoint("127.0.0.1:0", [Route("GET", "/api/who", who, Access.READ)], admin="s3cret",
                               viewer="v1ewer")
        open_ = HttpEndpoint("127.0.0.1:0", [Route("GET", "/api/who", who, Access.READ)])
        await guarded.start()
        await open_.start()
        try:
            assert await may_act(guarded, "s3cret") is True
            assert await may_act(guarded, "v1ewer") is False
            assert await may_act(open_, "") is True  # no token asked: everyone may
        finally:
            await guarded.stop()
            await open_.stop()

    asyncio.run(scenario())
