"""Domain errors, each mapped to one gRPC status code in one place (the master's servicers) and back to
the same class in the client, so callers on both sides catch meaning, not transport codes.
"""

from __future__ import annotations


class SparkyardError(Exception):
    """Base of every error Sparkyard raises on purpose."""

    code_name = "UNKNOWN"


class InvalidArgument(SparkyardError, ValueError):
    """Bad input; the message names the field."""

    code_name = "INVALID_ARGUMENT"


class NotFound(SparkyardError, LookupError):
    """An id that does not exist; the message names it."""

    code_name = "NOT_FOUND"


class FailedPrecondition(SparkyardError):
    """The object is not in a state that allows the call (stale fencing token, terminal state)."""

    code_name = "FAILED_PRECONDITION"


class Unavailable(SparkyardError):
    """The master, Redis or a worker could not be reached."""

    code_name = "UNAVAILABLE"


class Unauthenticated(SparkyardError):
    """A missing or wrong token."""

    code_name = "UNAUTHENTICATED"


class PermissionDenied(SparkyardError):
    """The token's role may not make this call; the message names the roles that may."""

    code_name = "PERMISSION_DENIED"


class ResourceExhausted(InvalidArgument):
    """Over a size limit; the message names the limit and how to change it."""

    code_name = "RESOURCE_EXHAUSTED"


BY_CODE_NAME: dict[str, type[SparkyardError]] = {
    cls.code_name: cls for cls in (InvalidArgument, NotFound, FailedPrecondition, Unavailable, Unauthenticated,
                                   PermissionDenied, ResourceExhausted)
}

# A standby master refuses calls with UNAVAILABLE and this trailing metadata: the leader's address
# ('' while an election is under way), which clients and workers follow.
LEADER_METADATA = "sparkyard-leader"
