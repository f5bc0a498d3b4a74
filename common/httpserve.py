"""A small HTTP server in the process's own event loop (aiohttp): ``/metrics`` of masters and workers.

aiohttp rather than prometheus-client's own threaded server: the handlers read the process's live state
(connected workers, leadership) and Redis asynchronously, which must happen in the loop that owns them,
and one server carries every HTTP route a process has.

With tokens set, every route but ``/healthz`` wants ``Authorization: Bearer <token>`` (Prometheus:
``authorization: {credentials_file: …}``); the tokens are compared in constant time. A master with TLS
serves HTTPS with the same certificate.
"""

from __future__ import annotations

import hmac
import logging
import ssl
from typing import Awaitable, Callable, Sequence

from aiohttp import web

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Shown to a caller whose token is missing or wrong (and in the WWW-Authenticate header).
REALM = 'Bearer realm="sparkyard"'


class HttpStartError(RuntimeError):
    """The address cannot be served (in use, not an address of this host); the message names it."""


def _authorized(request: web.Request, tokens: Sequence[bytes]) -> bool:
    sent = request.headers.get("Authorization", "").encode()
    return any(hmac.compare_digest(sent, b"Bearer " + t) for t in tokens)


class HttpEndpoint:
    """The routes of one process on ``HOST:PORT`` (port 0: any free one, see :attr:`port`)."""

    def __init__(self, address: str, routes: dict[str, Handler], tokens: Sequence[str] = (),
                 tls: tuple[str, str] | None = None) -> None:
        """``tokens``: any of them opens every route (empty ones are ignored); ``tls``: (cert, key) files to
        serve HTTPS with (the master's gRPC certificate)."""
        self.host, _, port = address.rpartition(":")
        self._tls = tls
        self.port = int(port)
        self._routes = routes
        self._tokens = [t.encode() for t in tokens if t]
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        @web.middleware
        async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
            if self._tokens and request.path != "/healthz" and not _authorized(request, self._tokens):
                raise web.HTTPUnauthorized(text="missing or wrong token: send Authorization: Bearer <token>\n",
                                           headers={"WWW-Authenticate": REALM})
            return await handler(request)

        async def healthz(request: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        app = web.Application(middlewares=[auth])
        app.router.add_get("/healthz", healthz)
        for path, handler in self._routes.items():
            app.router.add_get(path, handler)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        context = None
        if self._tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self._tls)
        site = web.TCPSite(self._runner, self.host.strip("[]"), self.port, ssl_context=context)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise HttpStartError(f"cannot serve http on {self.host}:{self.port}: {exc.strerror or exc}") from None
        if self.port == 0:
            server = site._server  # aiohttp keeps the listening socket here; port 0 needs the kernel's choice
            assert server is not None
            self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        log.info("http on %s:%d (%s)", self.host, self.port, ", ".join(["/healthz", *self._routes]))

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def metrics_response(body: bytes) -> web.Response:
    """Prometheus' text format (version 0.0.4, what prometheus-client's ``generate_latest`` writes)."""
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
