"""Domain errors, each mapped to one gRPC status code in one place (the master's servicers) and back to
the same class in the client, so callers on both sides catch meaning, not transport codes.
"""

from __future__ import annotations

# A bad value is quoted in an error message up to this many characters: gRPC carries the message in a
# header (16 KiB at most on the client), so a 100 KB value quoted in full would replace the message with
# "Stream removed"; the first 200 characters are enough to recognise it.
QUOTE_CHARS = 200
# Any error message is cut to this many bytes as sent, whatever it quotes (same reason). gRPC sends the
# message percent-encoded (every byte of a character outside printable ASCII, and '%', takes 3), so the
# cut counts encoded bytes: 4000 characters of 'é' would be 24 KB on the wire.
MAX_MESSAGE_BYTES = 4000


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters with the value's full length."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, (str, bytes)) else len(text)
    return f"{text[:limit]}… ({size:,} characters)"


def _wire_bytes(char: str) -> int:
    """Bytes ``char`` takes in gRPC's percent-encoded ``grpc-message`` header."""
    if " " <= char <= "~" and char != "%":
        return 1
    return 3 * len(char.encode("utf-8", "surrogatepass"))


def clip(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """A message cut to at most ``limit`` bytes as gRPC sends it, saying how long it was; the one place
    every error message passes before it leaves the master, so no input echoed in it can make the header
    overflow (the caller would get "Stream removed" instead of the error)."""
    if len(message) * 12 <= limit or sum(_wire_bytes(c) for c in message) <= limit:  # quick test: 12 bytes a char at most
        return message
    tail = f"… (message of {len(message):,} characters cut)"
    budget, used = limit - sum(_wire_bytes(c) for c in tail), 0
    for end, char in enumerate(message):
        used += _wire_bytes(char)
        if used > budget:
            return message[:end] + tail
    return message


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


class DataLoss(SparkyardError):
    """A stored record that cannot be read (written by hand, or by a version that stored something this one
    does not know); the message names it."""

    code_name = "DATA_LOSS"


class ResourceExhausted(InvalidArgument):
    """Over a size limit; the message names the limit and how to change it."""

    code_name = "RESOURCE_EXHAUSTED"


BY_CODE_NAME: dict[str, type[SparkyardError]] = {
    cls.code_name: cls for cls in (InvalidArgument, NotFound, FailedPrecondition, Unavailable, Unauthenticated,
                                   PermissionDenied, ResourceExhausted, DataLoss)
}

# A standby master refuses calls with UNAVAILABLE and this trailing metadata: the leader's address
# ('' while an election is under way), which clients and workers follow.
LEADER_METADATA = "sparkyard-leader"
# A master's servicer puts this on the errors it gives itself (master/services.py): an UNAVAILABLE it gives (a
# worker not connected, Redis down) is not a master the client could not reach (common/channel.py).
ANSWERED_METADATA = "sparkyard-answered"
