"""Who may call what: three roles, each with its own token, and one table of the roles of every RPC.

A scheduler runs code: whoever may submit may run anything on the workers. So the callers are split:

* **admin** (``--token``): every call;
* **worker** (``--worker-token``): a worker's stream and its bundle fetches, nothing else: a stolen
  worker token can take tasks (and see their code) but not submit, cancel or list jobs;
* **viewer** (``--viewer-token``): read-only calls, for dashboards and on-call people.

Callers send ``authorization: Bearer <token>``; the token is compared, in constant time, with each role's.
:data:`ROLES` names the roles allowed for every method of every service; a method missing from it is
refused whatever the token (deny by default), and a unit test checks that every RPC of the protos has an
entry. The health service is exempt, so load balancers can probe without a secret. A master with no token
treats every caller as admin (it listens on loopback only, unless ``--insecure``), but still refuses
methods missing from the table.
"""

from __future__ import annotations

import hmac
from enum import Enum
from typing import Any, Awaitable, Callable, Mapping

import grpc


class Role(str, Enum):
    ADMIN = "admin"
    WORKER = "worker"
    VIEWER = "viewer"


ADMIN_ONLY = frozenset({Role.ADMIN})
READ = frozenset({Role.ADMIN, Role.VIEWER})
WORKER = frozenset({Role.ADMIN, Role.WORKER})

# The roles allowed to call each method ("/package.Service/Method"). Admin includes worker: a cluster with
# only --token lets workers use it.
ROLES: Mapping[str, frozenset[Role]] = {
    "/sparkyard.v1.JobService/SubmitJob": ADMIN_ONLY,
    "/sparkyard.v1.JobService/SubmitJobs": ADMIN_ONLY,
    "/sparkyard.v1.JobService/GetJob": READ,
    "/sparkyard.v1.JobService/ListJobs": READ,
    "/sparkyard.v1.JobService/Cancel": ADMIN_ONLY,
    "/sparkyard.v1.JobService/PauseJob": ADMIN_ONLY,
    "/sparkyard.v1.JobService/ResumeJob": ADMIN_ONLY,
    "/sparkyard.v1.JobService/TriggerJob": ADMIN_ONLY,
    "/sparkyard.v1.JobService/Backfill": ADMIN_ONLY,
    "/sparkyard.v1.JobService/DeleteJob": ADMIN_ONLY,
    "/sparkyard.v1.JobService/UpdateJob": ADMIN_ONLY,
    "/sparkyard.v1.JobService/RerunRun": ADMIN_ONLY,
    "/sparkyard.v1.JobService/ListRuns": READ,
    "/sparkyard.v1.JobService/GetRun": READ,
    "/sparkyard.v1.JobService/WaitRun": READ,
    "/sparkyard.v1.JobService/StreamTaskLog": READ,
    # The stream carries registration, heartbeats, results and log chunks; a standby's refusal of it is
    # also how a worker probes a silent master.
    "/sparkyard.v1.WorkerService/Connect": WORKER,
    # Whether a task's attempt still holds its fencing token: asked before fenced output is published.
    "/sparkyard.v1.WorkerService/CheckFence": WORKER,
    # Asked before an upload (a submit's first step).
    "/sparkyard.v1.BundleService/HasBundle": ADMIN_ONLY,
    "/sparkyard.v1.BundleService/UploadBundle": ADMIN_ONLY,
    # A job's code: the workers that run it, not viewers.
    "/sparkyard.v1.BundleService/FetchBundle": WORKER,
    "/sparkyard.v1.ClusterService/ListWorkers": READ,
    "/sparkyard.v1.ClusterService/GetStatus": READ,
    "/sparkyard.v1.ClusterService/DrainWorker": ADMIN_ONLY,
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": READ,
}

EXEMPT_PREFIXES = ("/grpc.health.v1.Health/",)
TOKEN_HINT = "pass --token or --token-file, or set SPARKYARD_TOKEN"


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


def _names(roles: frozenset[Role]) -> str:
    return " or ".join(r.value for r in Role if r in roles)


class RoleAuthInterceptor(grpc.aio.ServerInterceptor):
    """Finds the caller's role from its token and lets the call through only if :data:`ROLES` allows it."""

    def __init__(self, tokens: Mapping[Role, str], roles: Mapping[str, frozenset[Role]] = ROLES) -> None:
        self._tokens = [(role, f"Bearer {token}".encode()) for role, token in tokens.items() if token]
        self._roles = roles

    def role_of(self, sent: str | bytes) -> Role | None:
        """The role whose token was sent (every role's token is compared, so the time taken does not tell
        which one came close); None when it matches none. No tokens configured: everyone is admin."""
        if not self._tokens:
            return Role.ADMIN
        sent_bytes = sent.encode() if isinstance(sent, str) else sent
        found = None
        for role, expected in self._tokens:
            if hmac.compare_digest(sent_bytes, expected):
                found = role
        return found

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method = details.method
        if handler is None or method.startswith(EXEMPT_PREFIXES):
            return handler
        sent = dict(details.invocation_metadata or ()).get("authorization", "")
        role = self.role_of(sent)
        short = method.rpartition("/")[2]
        if role is None:
            reason = "missing token" if not sent else "wrong token"
            return aborting_handler(handler, f"{reason}: {TOKEN_HINT}")
        allowed = self._roles.get(method)
        if allowed is None:
            return aborting_handler(handler, f"{short} has no role set on this master: refused to every caller",
                                    grpc.StatusCode.PERMISSION_DENIED)
        if role not in allowed:
            return aborting_handler(handler, f"{short} needs the {_names(allowed)} role; this token has the "
                                    f"{role.value} role", grpc.StatusCode.PERMISSION_DENIED)
        return handler
