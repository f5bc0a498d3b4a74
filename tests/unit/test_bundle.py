"""Packing a job's files: deterministic, mirroring the submit directory, honouring .sparkyardignore; and
the worker's cache: fetched once, verified, least recently used evicted but never a bundle in use."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import zipfile
from pathlib import Path
from typing import AsyncIterator

import pytest

from sparkyard.bundle import build
from sparkyard.errors import InvalidArgument
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.bundles import BundleCache, BundleError, archive_of


def _project(root: Path) -> Path:
    (root / "jobs").mkdir(parents=True)
    (root / "jobs" / "etl.py").write_text("def main(spark, ctx):\n    return 1\n")
    (root / "helpers.py").write_text("X = 1\n")
    (root / "data").mkdir()
    (root / "data" / "input.csv").write_text("a,b\n1,2\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"x")
    (root / "secret.env").write_text("TOKEN=1\n")
    (root / ".sparkyardignore").write_text("*.env\n")
    return root


def _names(data: bytes) -> list[str]:
    return zipfile.ZipFile(io.BytesIO(data)).namelist()


def test_a_bundle_mirrors_the_project_and_honours_the_ignore_file(tmp_path: Path) -> None:
    root = _project(tmp_path / "proj")
    packed = build(root / "jobs" / "etl.py", "main", submit_dir=root, bundle_dir=root)
    assert packed.entrypoint == "jobs/etl.py:main"
    assert sorted(_names(packed.data)) == [".sparkyardignore", "data/input.csv", "helpers.py", "jobs/etl.py"]
    assert packed.digest == hashlib.sha256(packed.data).hexdigest()


def test_the_same_files_give_the_same_digest_and_a_change_another(tmp_path: Path) -> None:
    root = _project(tmp_path / "proj")
    first = build(root / "jobs" / "etl.py", "main", submit_dir=root, bundle_dir=root)
    os.utime(root / "helpers.py", ns=(1, 1))  # a new mtime, the same content
    assert build(root / "jobs" / "etl.py", "main", submit_dir=root, bundle_dir=root).digest == first.digest
    (root / "helpers.py").write_text("X = 2\n")
    assert build(root / "jobs" / "etl.py", "main", submit_dir=root, bundle_dir=root).digest != first.digest


def test_files_outside_the_root_ship_under_their_base_name_and_clashes_are_refused(tmp_path: Path) -> None:
    root = _project(tmp_path / "proj")
    outside = tmp_path / "libs"
    outside.mkdir()
    (outside / "deps.zip").write_bytes(b"PK")
    packed = build(root / "jobs" / "etl.py", "", submit_dir=root, py_files=(outside / "deps.zip",),
                   files=(root / "data" / "input.csv",))
    assert packed.entrypoint == "jobs/etl.py" and packed.py_files == ("deps.zip",)
    assert sorted(_names(packed.data)) == ["data/input.csv", "deps.zip", "jobs/etl.py"]
    (outside / "etl.py").write_text("other")
    (root / "etl.py").write_text("mine")
    with pytest.raises(InvalidArgument, match="would both be shipped as etl.py"):
        build(root / "etl.py", "", submit_dir=root, files=(outside / "etl.py",))
    with pytest.raises(InvalidArgument, match="file not found"):
        build(root / "missing.py", "", submit_dir=root)


def test_files_are_named_in_the_bundle_and_two_of_one_name_are_refused(tmp_path: Path) -> None:
    root = _project(tmp_path / "proj")
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "input.csv").write_text("x\n")
    packed = build(root / "jobs" / "etl.py", "", submit_dir=root, files=(root / "data" / "input.csv",))
    assert packed.files == ("data/input.csv",)
    with pytest.raises(InvalidArgument, match="data/input.csv and input.csv have the same name"):
        build(root / "jobs" / "etl.py", "", submit_dir=root,
              files=(root / "data" / "input.csv", tmp_path / "ref" / "input.csv"))


def _archive(files: dict[str, str]) -> tuple[pb.BundleRef, bytes]:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    data = buffer.getvalue()
    return pb.BundleRef(digest=hashlib.sha256(data).hexdigest(), size=len(data)), data


class _Master:
    def __init__(self) -> None:
        self.stored: dict[str, bytes] = {}
        self.fetches = 0

    async def fetch(self, ref: pb.BundleRef) -> AsyncIterator[bytes]:
        self.fetches += 1
        await asyncio.sleep(0)
        data = self.stored[ref.digest]
        for i in range(0, len(data), 7):
            yield data[i:i + 7]


async def test_concurrent_attempts_fetch_a_bundle_once_and_get_its_files(tmp_path: Path) -> None:
    master = _Master()
    ref, data = _archive({"job.py": "print(1)", "pkg/mod.py": "X = 1"})
    master.stored[ref.digest] = data
    cache = BundleCache(tmp_path / "bundles", 10_000_000, master.fetch)
    paths = await asyncio.gather(*(cache.acquire(ref) for _ in range(5)))
    assert master.fetches == 1 and len(set(paths)) == 1
    assert (paths[0] / "pkg" / "mod.py").read_text() == "X = 1"
    assert archive_of(paths[0]).read_bytes() == data  # kept for Spark's executors
    restarted = BundleCache(tmp_path / "bundles", 10_000_000, master.fetch)
    restarted.load()
    assert await restarted.acquire(ref) == paths[0] and master.fetches == 1


async def test_a_corrupt_or_escaping_bundle_is_refused_and_nothing_is_cached(tmp_path: Path) -> None:
    master = _Master()
    ref, data = _archive({"job.py": "print(1)"})
    master.stored[ref.digest] = data[:-1] + b"x"
    cache = BundleCache(tmp_path / "bundles", 10_000_000, master.fetch)
    with pytest.raises(BundleError, match="does not match its digest"):
        await cache.acquire(ref)
    assert not (tmp_path / "bundles" / ref.digest).exists()
    evil, evil_data = _archive({"../escape.py": "x"})
    master.stored[evil.digest] = evil_data
    with pytest.raises(BundleError, match="outside the bundle"):
        await cache.acquire(evil)
    assert not (tmp_path / "escape.py").exists()


def _three_stored() -> tuple[_Master, list[pb.BundleRef]]:
    """A master holding three bundles of ~1 KB each."""
    master = _Master()
    refs = []
    for i in range(3):
        ref, data = _archive({"big.bin": str(i) * 1000})
        master.stored[ref.digest] = data
        refs.append(ref)
    return master, refs


async def test_least_recently_used_bundles_go_beyond_the_cap_but_never_one_in_use(tmp_path: Path) -> None:
    master, refs = _three_stored()
    cache = BundleCache(tmp_path / "bundles", 2500, master.fetch)
    pinned = await cache.acquire(refs[0])  # in use throughout
    await cache.acquire(refs[1])
    cache.release(refs[1])
    await cache.acquire(refs[2])
    cache.release(refs[2])
    assert pinned.exists() and not (tmp_path / "bundles" / refs[1].digest).exists()
    assert not archive_of(tmp_path / "bundles" / refs[1].digest).exists()
    assert (tmp_path / "bundles" / refs[2].digest).exists()


async def test_a_cached_bundle_is_taken_without_waiting_and_pinned_like_any(tmp_path: Path) -> None:
    master, refs = _three_stored()
    cache = BundleCache(tmp_path / "bundles", 1500, master.fetch)
    assert cache.acquire_cached(refs[0]) is None  # not on disk yet: no pin taken, the attempt fetches it
    root = await cache.acquire(refs[0])
    cache.release(refs[0])
    assert cache.acquire_cached(refs[0]) == root and master.fetches == 1
    await cache.acquire(refs[1])  # over the cap: the one pinned by acquire_cached stays
    assert root.exists()
    cache.release(refs[0])
    await cache.acquire(refs[2])  # its pin released: now it goes (refs[1] is still in use)
    assert not root.exists() and (tmp_path / "bundles" / refs[1].digest).exists()
