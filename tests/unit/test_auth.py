"""Roles: every RPC has its role set in one table; tokens map to roles; refusals name the roles."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_reflection.v1alpha import reflection

from sparkyard.master.auth import ADMIN_ONLY, READ, ROLES, WORKER, Role, RoleAuthInterceptor
from sparkyard.v1 import sparkyard_pb2 as pb

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"
TOKENS = {Role.ADMIN: "a" * 32, Role.WORKER: "w" * 32, Role.VIEWER: "v" * 32}


def _methods() -> set[str]:
    return {f"/{service.full_name}/{method.name}"
            for service in pb.DESCRIPTOR.services_by_name.values() for method in service.methods}


def test_every_rpc_of_every_service_has_a_role_set() -> None:
    missing = sorted(_methods() - set(ROLES))
    assert not missing, f"give these RPCs their roles in master/auth.py ROLES: {missing}"


def test_the_table_names_only_methods_that_exist() -> None:
    served = _methods() | {f"/{reflection.SERVICE_NAME}/ServerReflectionInfo"}
    assert set(ROLES) <= served, sorted(set(ROLES) - served)


def test_admin_may_call_everything_and_every_method_allows_someone() -> None:
    assert all(Role.ADMIN in roles for roles in ROLES.values())


def test_worker_token_reaches_only_the_stream_bundle_fetches_and_fence_checks() -> None:
    worker = {m.rpartition("/")[2] for m, roles in ROLES.items() if Role.WORKER in roles}
    assert worker == {"Connect", "FetchBundle", "CheckFence"}


def test_viewer_token_reaches_only_reads() -> None:
    viewer = {m.rpartition("/")[2] for m, roles in ROLES.items() if Role.VIEWER in roles}
    assert viewer == {"GetJob", "ListJobs", "ListRuns", "GetRun", "WaitRun", "StreamTaskLog", "ListWorkers",
                      "GetStatus", "ServerReflectionInfo"}


def _documented(prefix: str) -> set[str]:
    """The method names docs/security.md lists on its line starting with ``prefix``."""
    (line,) = [line for line in DOCS.read_text().splitlines() if line.startswith(prefix)]
    return set(re.findall(r"`(?:\w+\.)?([A-Z]\w+)`", line))


@pytest.mark.parametrize("prefix, roles", [
    ("| worker |", WORKER), ("| viewer |", READ), ("Everything else", ADMIN_ONLY),
])
def test_docs_list_the_same_methods_per_role_as_the_table(prefix: str, roles: frozenset[Role]) -> None:
    assert _documented(prefix) == {m.rpartition("/")[2] for m, allowed in ROLES.items() if allowed == roles}


@pytest.mark.parametrize("role", list(Role))
def test_each_token_names_its_role(role: Role) -> None:
    auth = RoleAuthInterceptor(TOKENS)
    assert auth.role_of(f"Bearer {TOKENS[role]}") == role
    assert auth.role_of(f"Bearer {TOKENS[role]}".encode()) == role


def test_a_wrong_or_missing_token_has_no_role() -> None:
    auth = RoleAuthInterceptor(TOKENS)
    assert auth.role_of("Bearer " + "x" * 32) is None
    assert auth.role_of("") is None
    assert auth.role_of(TOKENS[Role.ADMIN]) is None  # without the scheme


def test_without_tokens_every_caller_is_admin() -> None:
    assert RoleAuthInterceptor({}).role_of("") == Role.ADMIN
    assert RoleAuthInterceptor({Role.ADMIN: ""}).role_of("") == Role.ADMIN


class _Aborted(Exception):
    pass


class _Context:
    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""

    async def abort(self, code: grpc.StatusCode, details: str, trailing_metadata: Any = ()) -> None:
        self.code, self.details = code, details
        raise _Aborted


class _Details:
    def __init__(self, method: str, token: str) -> None:
        self.method = method
        self.invocation_metadata = (("authorization", f"Bearer {token}"),) if token else ()


async def _call(auth: RoleAuthInterceptor, method: str, token: str) -> tuple[grpc.StatusCode | None, str]:
    async def served(request: Any, context: Any) -> str:
        return "served"

    async def continuation(details: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(served)

    handler = await auth.intercept_service(continuation, _Details(method, token))  # type: ignore[arg-type]
    context = _Context()
    try:
        reply = await handler.unary_unary(None, context)
    except _Aborted:
        return context.code, context.details
    return grpc.StatusCode.OK, str(reply)


async def test_a_refusal_names_the_roles_needed_and_the_token_s_role_but_never_the_token() -> None:
    auth = RoleAuthInterceptor(TOKENS)
    code, details = await _call(auth, "/sparkyard.v1.JobService/SubmitJob", TOKENS[Role.VIEWER])
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert details == "SubmitJob needs the admin role; this token has the viewer role"
    code, details = await _call(auth, "/sparkyard.v1.JobService/ListJobs", TOKENS[Role.WORKER])
    assert (code, details) == (grpc.StatusCode.PERMISSION_DENIED,
                               "ListJobs needs the admin or viewer role; this token has the worker role")
    code, details = await _call(auth, "/sparkyard.v1.JobService/ListJobs", "not-a-token")
    assert code == grpc.StatusCode.UNAUTHENTICATED and details.startswith("wrong token")
    assert "not-a-token" not in details


async def test_allowed_calls_reach_the_service() -> None:
    auth = RoleAuthInterceptor(TOKENS)
    served = (grpc.StatusCode.OK, "served")
    assert await _call(auth, "/sparkyard.v1.JobService/ListJobs", TOKENS[Role.VIEWER]) == served
    assert await _call(auth, "/sparkyard.v1.WorkerService/Connect", TOKENS[Role.WORKER]) == served
    assert await _call(auth, "/sparkyard.v1.JobService/Cancel", TOKENS[Role.ADMIN]) == served
    assert await _call(auth, "/grpc.health.v1.Health/Check", "") == served


@pytest.mark.parametrize("tokens", [TOKENS, {}])
async def test_a_method_missing_from_the_table_is_refused_to_everyone(tokens: dict[Role, str]) -> None:
    auth = RoleAuthInterceptor(tokens)
    code, details = await _call(auth, "/sparkyard.v1.JobService/SomethingNew", TOKENS[Role.ADMIN])
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert details == "SomethingNew has no role set on this master: refused to every caller"
