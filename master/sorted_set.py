"""An in-memory sorted set with Redis ZSET order: by score, equal scores by member.

It backs :class:`~sparkyard.master.memory_store.MemoryStore`'s queues and indexes (ready queues, leases,
retry backoffs, the schedule), so the memory store hands things out in exactly the order Redis would.
A sorted list of (score, member) pairs plus a member → score map: O(log n) lookups, O(n) inserts, which
is plenty for the unit tests and single-process uses it serves.
"""

from __future__ import annotations

import bisect


class SortedSet:
    """Members with integer scores, iterated lowest (score, member) first."""

    def __init__(self) -> None:
        self._scores: dict[str, int] = {}
        self._order: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._scores)

    def __contains__(self, member: object) -> bool:
        return member in self._scores

    def add(self, member: str, score: int) -> None:
        """Insert ``member``, or move it to ``score`` if it is already here (ZADD)."""
        self.remove(member)
        self._scores[member] = score
        bisect.insort(self._order, (score, member))

    def remove(self, member: str) -> bool:
        """True if ``member`` was here (ZREM)."""
        score = self._scores.pop(member, None)
        if score is None:
            return False
        del self._order[bisect.bisect_left(self._order, (score, member))]
        return True

    def score(self, member: str) -> int | None:
        return self._scores.get(member)

    def first(self, n: int) -> list[str]:
        """The ``n`` lowest members (ZRANGE 0 n-1 for n > 0)."""
        return [member for _, member in self._order[:max(n, 0)]]

    def upto(self, max_score: int, limit: int) -> list[tuple[str, int]]:
        """Up to ``limit`` (member, score) pairs with score ≤ ``max_score``, lowest first (ZRANGEBYSCORE)."""
        end = bisect.bisect_right(self._order, max_score, key=lambda pair: pair[0])
        return [(member, score) for score, member in self._order[:min(end, max(limit, 0))]]

    def pop_first(self) -> str | None:
        """Remove and return the lowest member (ZPOPMIN), None when empty."""
        if not self._order:
            return None
        _, member = self._order.pop(0)
        del self._scores[member]
        return member

    def items(self, *, reverse: bool = False) -> list[tuple[str, int]]:
        """Every (member, score), lowest first, or highest first with ``reverse`` (ZREVRANGE)."""
        pairs = [(member, score) for score, member in self._order]
        return pairs[::-1] if reverse else pairs
