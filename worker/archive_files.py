"""The files a class archive directory holds (worker/class_archive.py), and the deleting of those no worker
uses any more.

Per archive name (``spark-<digest>.jsa``): the archive itself, its lock (held by a worker while it makes the
archive) and its training's log; while a training runs, the dump (``….jsa.PID.tmp``, renamed into place once
whole) and the training JVM's scratch directory (``….jsa.PID.jvm``). Why deleting is its own concern: a
directory shared by every worker of a user outlives installations (another Java or pyspark is another
name, ~150 MB each), trainings that failed or were stopped, and trainings of workers killed with -9 — all of
which would otherwise stay for good. Every deletion is decided under the name's lock, which a training holds
while it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)

# An archive no worker has started with for this long (another Java, pyspark or JVM options) is deleted.
UNUSED_DAYS = 30
# What a training writes beside the archive, named after it and the worker's pid: the archive as the JVM dumps
# it, renamed into place once whole; the training JVM's temporary files.
TRAINING_FILES = ("tmp", "jvm")


def lock_file(archive: Path) -> Path:
    return archive.with_suffix(".lock")


def log_file(archive: Path) -> Path:
    return archive.with_name(f"{archive.name}.log")


def training_file(archive: Path, kind: str) -> Path:
    return archive.with_name(f"{archive.name}.{os.getpid()}.{kind}")


def _files_of(archive: Path) -> tuple[Path, Path, Path]:
    """An archive name's own files: the archive, its lock and its training's log."""
    return archive, lock_file(archive), log_file(archive)


@contextlib.contextmanager
def _unless_made(archive: Path) -> Iterator[None]:
    """Hold the name's lock for the block: OSError if a training holds it (it runs, or is about to)."""
    with open(lock_file(archive), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield


def prune(directory: Path, keep: Path, now: float) -> None:
    """Delete the names of ``directory`` not used for :data:`UNUSED_DAYS` (but ``keep``), with their lock and
    log — also the lock and log of a name whose training never made one — then what trainings that no longer
    run left behind."""
    try:
        names = _names(directory)
    except OSError as exc:
        log.debug("class archives in %s not looked at: %s", directory, exc)
        return
    for name in names - {keep}:
        _delete_if_unused(name, now)
    _sweep_trainings(directory)


def _names(directory: Path) -> set[Path]:
    """Every archive name the directory has a file of: the archive, its lock or its training's log."""
    return ({p for p in directory.glob("spark-*.jsa")}
            | {p.with_suffix(".jsa") for p in directory.glob("spark-*.lock")}
            | {p.with_suffix("") for p in directory.glob("spark-*.jsa.log")})


def _last_used(name: Path) -> float:
    """When a worker last started with the archive; for one never made, when its training last wrote."""
    if name.is_file():
        return name.stat().st_mtime
    times = []
    for f in (lock_file(name), log_file(name)):
        try:
            times.append(f.stat().st_mtime)
        except FileNotFoundError:
            pass
    return max(times, default=0.0)


def _delete_if_unused(name: Path, now: float) -> None:
    """Delete an archive name's files unless they were used within :data:`UNUSED_DAYS` — decided under the
    name's lock, so that a worker starting to make it meanwhile keeps them."""
    limit = UNUSED_DAYS * 86_400
    try:
        if now - _last_used(name) <= limit:
            return
        with _unless_made(name):  # no training of it runs, nor can start now
            made = name.is_file()
            if made and now - name.stat().st_mtime <= limit:  # a worker started with it meanwhile
                return
            for leftover in _files_of(name):
                leftover.unlink(missing_ok=True)
    except OSError as exc:  # held (being made), gone meanwhile, or not writable
        log.debug("class archive %s not deleted: %s", name, exc)
        return
    if made:
        log.info("class archive %s deleted: no worker started with it for %d days", name, UNUSED_DAYS)
    else:
        log.info("the lock and log of class archive %s deleted: its training made none, %d days ago", name,
                 UNUSED_DAYS)


def _sweep_trainings(directory: Path) -> None:
    """Delete what trainings that no longer run left behind. A worker killed with -9 while it trained cannot
    clean up: its training's scratch directory stays, and the orphaned JVM, once it exits, writes a whole
    archive (~150 MB) under a temporary name that nothing renames. A training holds its archive's lock while
    it runs, so a lock taken here means none of that name runs on this machine."""
    left: dict[Path, list[Path]] = {}
    for kind in TRAINING_FILES:
        for entry in directory.glob(f"spark-*.jsa.*.{kind}"):
            name, _, pid = entry.name.removesuffix(f".{kind}").rpartition(".")
            if pid.isdigit():
                left.setdefault(directory / name, []).append(entry)
    for archive, entries in left.items():
        try:
            with _unless_made(archive):
                for entry in entries:
                    if entry.is_dir():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)
                    log.info("deleted %s, left by a class archive training that no longer runs", entry)
        except OSError as exc:  # held: that training runs (or the directory cannot be written)
            log.debug("leftovers of %s not deleted: %s", archive, exc)
