"""A small HTTP server in the process's own event loop (aiohttp): ``/metrics`` of masters and workers, and
the master's web console (its JSON API and its static files).

aiohttp rather than prometheus-client's own threaded server: the handlers read the process's live state
(connected workers, leadership) and Redis asynchronously, which must happen in the loop that owns them,
and one server carries every HTTP route a process has.

Each route declares its :class:`Access`: public (``/healthz``, the console's static files: they hold no
data), read or act. With tokens set, read and act routes want ``Authorization: Bearer <token>``
(Prometheus: ``authorization: {credentials_file: …}``); the tokens are compared in constant time. Reads
and actions are told apart so that role tokens (a viewer may read, only an admin may act) map onto the
table of routes without touching the handlers. A master with TLS serves HTTPS with the same certificate.
Every response carries a Content-Security-Policy that allows only this server's own scripts, styles and
connections (no inline script, no other origin).
"""

from __future__ import annotations

import enum
import errno
import hmac
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Sequence

from aiohttp import web

from sparkyard.addresses import holder_of
from sparkyard.startup import StartupError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Shown to a caller whose token is missing or wrong (and in the WWW-Authenticate header).
REALM = 'Bearer realm="sparkyard"'
# Sent with every response: scripts, styles, images and fetches from this origin only; nothing inline
# (user data — job names, arguments, log text — can then never run as script even if it reached the page
# unescaped), no framing, no plugins.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


# The request key a handler reads to learn whether its caller may act (absent: no token asked, so it may).
MAY_ACT = web.RequestKey("sparkyard.may_act", bool)


class Access(enum.Enum):
    """What a route lets its caller do, which decides the token it needs."""

    PUBLIC = "public"  # no token: health checks, the console's static files
    READ = "read"      # looks at the cluster
    ACT = "act"        # changes it (trigger, pause, drain …)


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # aiohttp's syntax: /api/jobs/{job_id}
    handler: Handler
    access: Access


def _holds(request: web.Request, token: bytes) -> bool:
    sent = request.headers.get("Authorization", "").encode()
    return bool(token) and hmac.compare_digest(sent, b"Bearer " + token)


class HttpEndpoint:
    """The routes of one process on ``HOST:PORT`` (port 0: any free one, see :attr:`port`), and
    ``static``: URL prefix → directory of public files.

    ``admin``'s token opens every route; ``viewer``'s only the read ones (a viewer token on an action is
    403, naming the role it needs). Without an admin token nothing is asked (such a process serves
    loopback only). ``tls``: (certificate, key) files to serve HTTPS with (the master's gRPC ones)."""

    def __init__(self, address: str, routes: Sequence[Route], *, admin: str = "", viewer: str = "",
                 static: dict[str, Path] | None = None, tls: tuple[str, str] | None = None) -> None:
        self.host, _, port = address.rpartition(":")
        self.port = int(port)
        self._routes = list(routes)
        self._static = static or {}
        self._admin, self._viewer = admin.encode(), viewer.encode()
        self._tls = tls
        self._runner: web.AppRunner | None = None

    def _guarded(self, route: Route) -> Handler:
        """The route's handler behind the token check its access asks for (the one place tokens are checked)."""
        if route.access is Access.PUBLIC or not self._admin:
            return route.handler

        async def guarded(request: web.Request) -> web.StreamResponse:
            # Both comparisons always run, so the time taken does not tell which token came close.
            admin, viewer = _holds(request, self._admin), _holds(request, self._viewer)
            if not (admin or viewer):
                raise web.HTTPUnauthorized(text="missing or wrong token: send Authorization: Bearer <token>\n",
                                           headers={"WWW-Authenticate": REALM})
            if route.access is Access.ACT and not admin:
                raise web.HTTPForbidden(text="this action needs the admin role; this token has the viewer role\n")
            request[MAY_ACT] = admin
            return await route.handler(request)

        return guarded

    async def start(self) -> None:
        async def healthz(request: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        async def secure(request: web.Request, response: web.StreamResponse) -> None:
            response.headers.update(SECURITY_HEADERS)

        app = web.Application()
        app.on_response_prepare.append(secure)
        for route in [Route("GET", "/healthz", healthz, Access.PUBLIC), *self._routes]:
            app.router.add_route(route.method, route.path, self._guarded(route))
        for prefix, directory in self._static.items():
            app.router.add_static(prefix, directory)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        context = None
        if self._tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            try:
                context.load_cert_chain(*self._tls)
            except (OSError, ssl.SSLError) as exc:
                await self._runner.cleanup()
                self._runner = None
                raise StartupError(f"cannot serve https on {self.host}:{self.port} with certificate "
                                   f"{self._tls[0]} and key {self._tls[1]}: {exc}") from None
        site = web.TCPSite(self._runner, self.host.strip("[]"), self.port, ssl_context=context)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            holder = holder_of(self.port) if exc.errno == errno.EADDRINUSE else ""
            raise StartupError(f"cannot serve http on {self.host}:{self.port}: {exc.strerror or exc}{holder}") from None
        if self.port == 0:
            server = site._server  # aiohttp keeps the listening socket here; port 0 needs the kernel's choice
            assert server is not None
            self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        log.info("http on %s:%d (%d routes%s)", self.host, self.port, len(self._routes) + 1,
                 "".join(f", {p}" for p in self._static))

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def metrics_response(body: bytes) -> web.Response:
    """Prometheus' text format (version 0.0.4, what prometheus-client's ``generate_latest`` writes)."""
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
