"""What in a Redis namespace still refers to an id: the check that deleting something left nothing behind.

Ids name their parents (a run id starts with its job id, a task id with its run id: common/ids.py), so
searching for a job id finds its runs, tasks and attempts too. Looked at: every key name under the
namespace, every member of its sets and sorted sets, every field and value of its hashes, every element of
its lists. Not looked at: idempotency keys (the hashes ``P:idem:…`` → job ids), which are meant to
outlive their job until their TTL runs out (a retry after that TTL makes a new job), and plain string values
(the counters: fence, epoch).
"""

from __future__ import annotations

from typing import Iterable

import redis


def references(client: redis.Redis, namespace: str, needles: Iterable[str]) -> list[str]:
    """Every place in ``namespace`` that mentions one of ``needles`` (``client`` must not decode replies:
    bundles are binary): ``key`` for a key name, ``key
    [member]`` for a set or zset member, ``key {field}`` for a hash field or value, ``key (element)`` for
    a list element. Empty when nothing refers to them."""
    wanted = [n for n in needles if n]
    found: list[str] = []

    def hit(text: bytes | str) -> bool:
        value = text.decode(errors="replace") if isinstance(text, bytes) else text
        return any(n in value for n in wanted)

    for raw_key in client.scan_iter(match=f"{namespace}:*", count=1000):
        key = raw_key.decode(errors="replace") if isinstance(raw_key, bytes) else raw_key
        if key.startswith(f"{namespace}:idem:"):
            continue
        if hit(key):
            found.append(key)
            continue
        kind = client.type(raw_key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "set":
            found += [f"{key} [{m!r}]" for m in client.sscan_iter(raw_key, count=1000) if hit(m)]
        elif kind == "zset":
            found += [f"{key} [{m!r}]" for m, _ in client.zscan_iter(raw_key, count=1000) if hit(m)]
        elif kind == "hash":
            found += [f"{key} {{{f!r}}}" for f, v in client.hscan_iter(raw_key, count=1000) if hit(f) or hit(v)]
        elif kind == "list":
            found += [f"{key} ({e!r})" for e in client.lrange(raw_key, 0, -1) if hit(e)]
    return found
