"""What a HOST:PORT setting says about who can reach it: an address on loopback is reachable from this
machine only, so a master or worker may serve it without TLS or a token (docs/security.md)."""

from __future__ import annotations


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1", "[::1]") or host.startswith("127.")
