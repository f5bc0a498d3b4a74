"""Shipped code, master side: bundles stored once in Redis in chunks, fetched by workers, collected when
no job needs them.

An upload is written under a temporary key and published with one ``RENAME`` only after its size and
sha256 were checked, so a worker never reads half a bundle and a broken upload leaves nothing behind.
A job that names a bundle holds a reference (``P:bundle:{digest}:jobs``, written by ``submit.lua`` and
``update.lua`` in the step that stores the job, only while the bundle exists); the collector
(``bundle_gc.lua``) deletes a bundle once every job naming it is cancelled or deleted (a completed job can
still be triggered or rerun), or when none named it within a grace period after its upload; never within
that grace after a client was told it is here (``HasBundle``), so the submit that follows the answer finds
it. Every write is a fenced script of the store (upload chunks and their publication included), so a master
that no longer leads stores and deletes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from typing import AsyncIterator, Iterable

from sparkyard.bundle import CHUNK_BYTES
from sparkyard.errors import InvalidArgument, NotFound, ResourceExhausted, quote
from sparkyard.master.redis_bundles import RedisBundles, UploadExpired
from sparkyard.master.scripts import log_failure
from sparkyard.timeutil import format_size
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# A bundle nobody references is kept this long after its upload, and any bundle this long after a client was
# told it is here: its job's submit follows the upload or the answer.
UNREFERENCED_GRACE_S = 3600.0
# How often the collector runs, and how many bundles it looks at per step (bounded work per call).
GC_INTERVAL_S = 60.0
GC_BATCH = 100
# An unfinished upload's temporary key expires after this long (a client that died mid-upload).
UPLOAD_TTL_S = 3600


def check_ref(ref: pb.BundleRef) -> None:
    if len(ref.digest) != 64 or any(c not in "0123456789abcdef" for c in ref.digest):
        raise InvalidArgument(f"bundle.digest: {quote(ref.digest)} is not a sha256 (64 lowercase hex digits)")
    if ref.size <= 0:
        raise InvalidArgument("bundle.size: must be positive")


class BundleStore:
    """Uploads checked against what they announced, fetches chunk by chunk, and the collector's loop; the
    bundles themselves are the store's (:class:`~sparkyard.master.redis_bundles.RedisBundles`)."""

    def __init__(self, bundles: RedisBundles, max_bytes: int) -> None:
        self._bundles = bundles
        self.max_bytes = max_bytes

    async def present(self, digests: Iterable[str]) -> set[str]:
        return await self._bundles.present(digests)

    async def hold(self, digest: str) -> bool:
        """Whether a bundle is stored, kept for the grace from now if it is: asked by a client about to name
        it in a job."""
        return await self._bundles.hold(digest)

    def _check_size(self, size: int) -> None:
        if size > self.max_bytes:
            raise ResourceExhausted(f"bundle is {format_size(size)}, over the master's limit of "
                                    f"{format_size(self.max_bytes)} (--max-bundle); ship less (.sparkyardignore) "
                                    "or raise the limit")

    async def upload(self, chunks: AsyncIterator[pb.BundleChunk]) -> pb.BundleRef:
        first = await anext(chunks, None)
        if first is None or not first.HasField("ref"):
            raise InvalidArgument("upload: the first chunk must name the bundle (ref)")
        ref = pb.BundleRef(digest=first.ref.digest, size=first.ref.size)
        check_ref(ref)
        self._check_size(ref.size)
        if await self.hold(ref.digest):
            async for _ in chunks:  # drain: the bundle is already here
                pass
            return ref
        upload_id = uuid.uuid4().hex
        digest, received, index = hashlib.sha256(), 0, 0
        try:
            chunk: pb.BundleChunk | None = first
            while chunk is not None:
                if len(chunk.data) > CHUNK_BYTES:
                    raise InvalidArgument(f"upload: chunk of {len(chunk.data)} bytes, over {CHUNK_BYTES}")
                received += len(chunk.data)
                self._check_size(received)
                if chunk.data:
                    digest.update(chunk.data)
                    await self._bundles.put_chunk(ref.digest, upload_id, index, chunk.data, UPLOAD_TTL_S * 1000)
                    index += 1
                chunk = await anext(chunks, None)
            if received != ref.size or digest.hexdigest() != ref.digest:
                raise InvalidArgument(f"upload: received {received} bytes with sha256 {digest.hexdigest()[:12]}…, "
                                      f"not the {ref.size} bytes of {ref.digest[:12]}… announced")
            await self._bundles.publish(ref.digest, upload_id, received, index)
        except UploadExpired as exc:
            raise InvalidArgument(f"upload: {exc} (over {UPLOAD_TTL_S} s); upload it again") from None
        except BaseException:
            await self._bundles.discard(ref.digest, upload_id)
            raise
        log.info("bundle %s stored (%s)", ref.digest[:12], format_size(received))
        return ref

    async def fetch(self, ref: pb.BundleRef) -> AsyncIterator[pb.BundleChunk]:
        check_ref(pb.BundleRef(digest=ref.digest, size=ref.size or 1))
        count = await self._bundles.chunk_count(ref.digest)
        if count is None:
            raise NotFound(f"bundle {ref.digest} not found (deleted, or never uploaded)")
        for index in range(count):
            data = await self._bundles.chunk(ref.digest, index)
            if data is None:
                raise NotFound(f"bundle {ref.digest} was deleted while being fetched")
            yield pb.BundleChunk(data=data)

    async def collect(self) -> list[str]:
        return await self._bundles.collect(int(UNREFERENCED_GRACE_S * 1000), GC_BATCH)

    async def run_collector(self) -> None:
        """The collector loop: one bounded script call per interval, never the end of the master."""
        while True:
            await asyncio.sleep(GC_INTERVAL_S)
            try:
                deleted = await self.collect()
                if deleted:
                    log.info("deleted %d bundles no job needs any more", len(deleted))
            except Exception:
                log_failure(log, "bundle collection failed; retrying in %.0fs", GC_INTERVAL_S)
