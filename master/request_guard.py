"""Every request is decoded, size-checked and checked for well-formed values in one place, before any
servicer sees it.

gRPC decodes a request with the handler's deserializer before the servicer runs; random bytes on the wire
then end in a traceback in the log and UNKNOWN for the caller, and a request over the size limit in
gRPC's own RESOURCE_EXHAUSTED that does not say which setting to raise. :class:`RequestGuard` wraps each
handler's deserializer: a request that is too large, does not decode, or holds a value its type does not
allow (:mod:`sparkyard.wellformed`: an unknown enum number, a Timestamp past year 9999, a NaN) becomes a
:class:`Refusal`, and the wrapped behaviour ends the call with its status — RESOURCE_EXHAUSTED naming
``--max-message``, or INVALID_ARGUMENT naming the message type or the field. On a stream (a worker's
``Connect``, ``UploadBundle``) the refusal is raised from the request iterator as the matching domain
error, so the servicer ends the stream with it like any other.

It is the innermost interceptor: a call refused for its token or because this master stands by is
refused before its request is looked at.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

import grpc
from google.protobuf.message import DecodeError

from sparkyard import wellformed
from sparkyard.errors import InvalidArgument, ResourceExhausted, SparkyardError, clip
from sparkyard.timeutil import format_size


Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]]


class Refusal:
    """A request that never reached its servicer, and why (the error to end the call with)."""

    def __init__(self, error: SparkyardError) -> None:
        self.error = error


def _guarded(deserialize: Callable[[bytes], Any], type_name: str, max_bytes: int) -> Callable[[bytes], Any]:
    def guarded(data: bytes) -> Any:
        if len(data) > max_bytes:
            return Refusal(ResourceExhausted(
                f"request {type_name} is {format_size(len(data))}, over the master's limit of "
                f"{format_size(max_bytes)} (--max-message)"))
        try:
            message = deserialize(data)
        except DecodeError as exc:
            return Refusal(InvalidArgument(f"request is not a valid {type_name} ({exc})"))
        try:
            wellformed.check(message)
        except wellformed.MalformedField as exc:
            return Refusal(InvalidArgument(str(exc)))
        return message

    return guarded


async def _refuse(context: grpc.aio.ServicerContext, refusal: Refusal) -> None:
    await context.abort(grpc.StatusCode[refusal.error.code_name], clip(str(refusal.error)))


async def _checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, Refusal):
            raise request.error
        yield request


def _wrap(handler: grpc.RpcMethodHandler, type_name: str, max_bytes: int) -> grpc.RpcMethodHandler:
    deserializer = _guarded(handler.request_deserializer, type_name, max_bytes)
    serializer = handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        behaviour_ss = handler.stream_stream

        async def stream_stream(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for response in behaviour_ss(_checked(requests), context):
                yield response

        return grpc.stream_stream_rpc_method_handler(stream_stream, deserializer, serializer)
    if handler.request_streaming:
        behaviour_su = handler.stream_unary

        async def stream_unary(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            return await behaviour_su(_checked(requests), context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, deserializer, serializer)
    if handler.response_streaming:
        behaviour_us = handler.unary_stream

        async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if isinstance(request, Refusal):
                await _refuse(context, request)
            async for response in behaviour_us(request, context):
                yield response

        return grpc.unary_stream_rpc_method_handler(unary_stream, deserializer, serializer)
    behaviour_uu = handler.unary_unary

    async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Refusal):
            await _refuse(context, request)
        return await behaviour_uu(request, context)

    return grpc.unary_unary_rpc_method_handler(unary_unary, deserializer, serializer)


class RequestGuard(grpc.aio.ServerInterceptor):
    """Wraps every handler that decodes its requests (see the module docstring)."""

    def __init__(self, max_message_bytes: int) -> None:
        self._max_bytes = max_message_bytes
        self._handlers: dict[str, grpc.RpcMethodHandler | None] = {}

    async def intercept_service(self, continuation: Continuation,
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        wrapped = self._handlers.get(details.method)
        if wrapped is None:
            message_type = getattr(handler.request_deserializer, "__self__", None)
            descriptor = getattr(message_type, "DESCRIPTOR", None)
            type_name = descriptor.full_name if descriptor is not None else details.method
            wrapped = _wrap(handler, type_name, self._max_bytes)
            self._handlers[details.method] = wrapped
        return wrapped
