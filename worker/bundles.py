"""Shipped code, worker side: bundles fetched from the master once per digest, verified, extracted and
kept on disk (least recently used beyond a size cap, never one that an attempt is using).

``<work_dir>/bundles/<digest>/`` is a bundle's root. It is written under a temporary name and renamed
into place only after the archive's sha256 and size matched its digest, so a directory of that name is
always a complete, verified bundle — which is also how the cache is rebuilt when a worker restarts.
The verified archive itself is kept beside it, ``<digest>.zip`` (written before the directory is renamed
into place): Spark ships it to executors as a py-file, so a UDF imports the bundle's modules on any host.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import os
import shutil
import time
import uuid
import zipfile
from pathlib import Path
from typing import AsyncIterator, Callable

from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

Fetch = Callable[[pb.BundleRef], AsyncIterator[bytes]]


class BundleError(Exception):
    """A bundle could not be fetched or does not match its digest."""


def _tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def archive_of(root: Path) -> Path:
    """The verified archive of the bundle whose root is ``root``."""
    return root.with_name(f"{root.name}.zip")


def _extract(data: bytes, target: Path) -> None:
    """Unpack into a temporary directory beside ``target`` and rename it into place, its archive first."""
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    zipped = temp.with_name(f"{temp.name}.zip")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for name in archive.namelist():
                parts = name.split("/")
                if name.startswith("/") or ".." in parts:
                    raise BundleError(f"bundle entry {name!r} points outside the bundle")
            archive.extractall(temp)
        zipped.write_bytes(data)
        os.rename(zipped, archive_of(target))
        os.rename(temp, target)
    except FileExistsError:  # another fetch of the same digest won: the same verified content
        pass
    except OSError as exc:
        if not target.is_dir():
            raise BundleError(f"cannot extract the bundle: {exc}") from None
    finally:
        shutil.rmtree(temp, ignore_errors=True)
        zipped.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class BundleCache:
    def __init__(self, root: Path, max_bytes: int, fetch: Fetch) -> None:
        self._root = root
        self._max_bytes = max_bytes
        self._fetch = fetch
        self._sizes: dict[str, int] = {}
        self._used: dict[str, float] = {}  # digest → last use (monotonic)
        self._pins: dict[str, int] = {}
        self._fetching: dict[str, asyncio.Future[Path]] = {}

    def load(self) -> None:
        """Rebuild the cache's view from disk (a restarted worker keeps its bundles)."""
        self._root.mkdir(parents=True, exist_ok=True)
        for entry in self._root.iterdir():
            if entry.name.startswith("."):  # an extraction that never finished
                _remove(entry)
            elif entry.is_dir() and not archive_of(entry).is_file():  # cached before archives were kept
                shutil.rmtree(entry, ignore_errors=True)
            elif entry.is_dir():
                self._sizes[entry.name] = _tree_size(entry) + archive_of(entry).stat().st_size
                self._used[entry.name] = time.monotonic() - (time.time() - entry.stat().st_mtime)
        for entry in self._root.glob("*.zip"):
            if not entry.with_suffix("").is_dir():
                entry.unlink(missing_ok=True)

    def acquire_cached(self, ref: pb.BundleRef) -> Path | None:
        """The bundle's root, pinned until :meth:`release`, when it is on disk already (else None: no pin)
        — every attempt after a digest's first is placed here without a task of its own."""
        digest = ref.digest
        if digest not in self._sizes:
            return None
        self._pins[digest] = self._pins.get(digest, 0) + 1
        self._used[digest] = time.monotonic()
        return self._root / digest

    async def acquire(self, ref: pb.BundleRef) -> Path:
        """The bundle's root directory, fetched if needed; pinned until :meth:`release`."""
        digest = ref.digest
        self._pins[digest] = self._pins.get(digest, 0) + 1
        try:
            path = self._root / digest
            if digest not in self._sizes:
                future = self._fetching.get(digest)
                if future is None:
                    future = asyncio.ensure_future(self._download(ref))
                    self._fetching[digest] = future
                    future.add_done_callback(lambda _: self._fetching.pop(digest, None))
                path = await asyncio.shield(future)
            self._used[digest] = time.monotonic()
            return path
        except BaseException:
            self.release(ref)
            raise

    def release(self, ref: pb.BundleRef) -> None:
        left = self._pins.get(ref.digest, 0) - 1
        if left > 0:
            self._pins[ref.digest] = left
        else:
            self._pins.pop(ref.digest, None)

    async def _download(self, ref: pb.BundleRef) -> Path:
        started = time.monotonic()
        parts, sha, size = [], hashlib.sha256(), 0
        async for data in self._fetch(ref):
            sha.update(data)
            size += len(data)
            parts.append(data)
            if size > ref.size:
                raise BundleError(f"bundle {ref.digest[:12]} is larger than its {ref.size} bytes")
        if size != ref.size or sha.hexdigest() != ref.digest:
            raise BundleError(f"bundle {ref.digest[:12]} does not match its digest (got {size} bytes, sha256 "
                              f"{sha.hexdigest()[:12]})")
        target = self._root / ref.digest
        self._root.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(_extract, b"".join(parts), target)
        self._sizes[ref.digest] = await asyncio.to_thread(_tree_size, target) + size
        log.info("bundle %s fetched and verified (%d bytes) in %.0f ms", ref.digest[:12], size,
                 (time.monotonic() - started) * 1000)
        await asyncio.to_thread(self._evict)
        return target

    def _evict(self) -> None:
        """Remove least recently used bundles beyond the cap, never a pinned one."""
        total = sum(self._sizes.values())
        for digest in sorted(self._sizes, key=lambda d: self._used.get(d, 0.0)):
            if total <= self._max_bytes:
                break
            if self._pins.get(digest):
                continue
            shutil.rmtree(self._root / digest, ignore_errors=True)
            archive_of(self._root / digest).unlink(missing_ok=True)
            total -= self._sizes.pop(digest)
            self._used.pop(digest, None)
            log.info("bundle %s removed from the cache (over %d bytes)", digest[:12], self._max_bytes)

    @property
    def size(self) -> int:
        return sum(self._sizes.values())


def fetch_over(channel: Callable[[], object | None], metadata: Callable[[], list[tuple[str, str]]]) -> Fetch:
    """A Fetch that calls BundleService.FetchBundle on the worker's current channel to the master."""
    from sparkyard.v1 import sparkyard_pb2_grpc as pbg

    async def fetch(ref: pb.BundleRef) -> AsyncIterator[bytes]:
        current = channel()
        if current is None:
            raise BundleError("not connected to a master")
        stub = pbg.BundleServiceStub(current)
        async for chunk in stub.FetchBundle(ref, metadata=metadata()):
            yield chunk.data

    return fetch
