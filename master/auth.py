"""Token authentication for every RPC (a scheduler runs code: an open port is remote code execution).

Clients and workers send ``authorization: Bearer <token>`` metadata. The health service is exempt so
load balancers and orchestrators can probe liveness without the secret; reflection is not.
"""

from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable

import grpc

EXEMPT_PREFIXES = ("/grpc.health.v1.Health/",)


def aborting_handler(like: grpc.RpcMethodHandler, message: str,
                     code: grpc.StatusCode = grpc.StatusCode.UNAUTHENTICATED,
                     trailing: tuple[tuple[str, str], ...] = ()) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``like`` that only refuses the call with ``code`` and ``message``."""
    async def abort_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message, trailing_metadata=trailing)

    async def abort_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message, trailing_metadata=trailing)
        yield  # pragma: no cover - makes this an async generator

    if like.request_streaming and like.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort_stream)
    if like.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort_unary)
    if like.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort_stream)
    return grpc.unary_unary_rpc_method_handler(abort_unary)


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(EXEMPT_PREFIXES):
            return handler
        sent = dict(details.invocation_metadata or ()).get("authorization", "")
        sent_bytes = sent.encode() if isinstance(sent, str) else sent
        if sent_bytes and hmac.compare_digest(sent_bytes, self._expected):
            return handler
        reason = "missing token" if not sent else "wrong token"
        return aborting_handler(handler, f"{reason}: pass --token or set SPARKYARD_TOKEN")


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1", "[::1]") or host.startswith("127.")
