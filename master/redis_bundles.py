"""The store's door to shipped bundles in Redis: every write one fenced script (``bundle_upload.lua``,
``bundle_hold.lua``, ``bundle_gc.lua``), every read a plain command.

Chunks are bytes, so this door reads with a client of its own that leaves replies undecoded; its writes go
through the master's :class:`~sparkyard.master.scripts.ScriptLibrary`, so they carry the leader epoch like
every other write (only the leader takes uploads: a standby refuses the bundle service).
"""

from __future__ import annotations

import contextlib
from typing import Iterable

import redis.exceptions
from redis.asyncio import Redis

from sparkyard.keys import Keys
from sparkyard.master.scripts import Fenced, ScriptLibrary


class UploadExpired(RuntimeError):
    """An upload's temporary key expired before it was published: nothing was stored."""


class RedisBundles:
    def __init__(self, blobs: Redis, keys: Keys, scripts: ScriptLibrary) -> None:
        self._blobs = blobs
        self._keys = keys
        self._scripts = scripts

    async def present(self, digests: Iterable[str]) -> set[str]:
        """Which of these bundles are stored (one round trip)."""
        pipe = self._blobs.pipeline(transaction=False)
        wanted = list(dict.fromkeys(digests))
        for digest in wanted:
            pipe.exists(self._keys.bundle(digest))
        return {d for d, n in zip(wanted, await pipe.execute()) if n}

    async def hold(self, digest: str) -> bool:
        """Whether the bundle is stored; if it is, the collector keeps it for its grace from now, so the
        job a client submits after this answer finds it (``bundle_hold.lua``)."""
        return bool(await self._scripts("bundle_hold", [self._keys.bundle(digest)], []))

    def _upload_keys(self, digest: str, upload_id: str) -> list[str]:
        return [self._keys.bundle_upload(digest, upload_id), self._keys.bundle(digest), self._keys.bundles]

    async def put_chunk(self, digest: str, upload_id: str, index: int, data: bytes, ttl_ms: int) -> None:
        """Add a chunk to an unfinished upload, which expires ``ttl_ms`` after its latest chunk."""
        await self._scripts("bundle_upload", self._upload_keys(digest, upload_id), ["chunk", index, data, ttl_ms])

    async def publish(self, digest: str, upload_id: str, size: int, chunks: int) -> None:
        """Make a checked upload the bundle, whole, in one step."""
        status = await self._scripts("bundle_upload", self._upload_keys(digest, upload_id),
                                     ["publish", size, chunks, digest])
        if status == "expired":
            raise UploadExpired(f"upload of bundle {digest[:12]}… expired before it was complete")

    async def discard(self, digest: str, upload_id: str) -> None:
        """Delete a failed upload's chunks now. Best effort: refused (this master no longer leads) or with
        Redis unreachable, they expire on their own, and the upload's own error is the one to report."""
        with contextlib.suppress(Fenced, redis.exceptions.RedisError):
            await self._scripts("bundle_upload", self._upload_keys(digest, upload_id), ["drop"])

    async def chunk_count(self, digest: str) -> int | None:
        """How many chunks a stored bundle has (None: it is not stored)."""
        count = await self._blobs.hget(self._keys.bundle(digest), "chunks")
        return None if count is None else int(count)

    async def chunk(self, digest: str, index: int) -> bytes | None:
        """One chunk of a bundle (None: the bundle was deleted meanwhile)."""
        data = await self._blobs.hget(self._keys.bundle(digest), f"c{index}")
        return data if data is None or isinstance(data, bytes) else data.encode("latin-1")

    async def collect(self, grace_ms: int, batch: int) -> list[str]:
        """One collector step (``bundle_gc.lua``): the digests it deleted."""
        deleted = await self._scripts("bundle_gc", [self._keys.bundles], [grace_ms, batch])
        return [d.decode() if isinstance(d, bytes) else d for d in deleted]
