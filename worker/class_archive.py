"""A class-data-sharing (CDS) archive of the Spark JVM's classes, so that every Spark JVM the worker starts
loads Spark's ~10 000 classes from one memory-mapped file instead of parsing and verifying them from jars.

Why: a Spark JVM's start is what users wait for — a warm driver warming after a start, a crash or its
retirement, every attempt of the submit runner (a cold ``spark-submit``), the Spark Connect server — and
most of it is class loading. With a JDK's dynamic archive (``-XX:SharedArchiveFile``) a local[1] driver
takes about half the CPU to be ready (docs/benchmarks.md).

The archive fits one Java, one Spark installation (its jars, at their path: the JVM checks its class path)
and the JVM options that shape the archive (``-XX``/``-X`` options of the worker's driver conf and of
``JAVA_TOOL_OPTIONS``: GC, compressed pointers…); its file name is a digest of all of them
(:func:`archive_name`), so a different Java or pyspark never starts from a stale one. It is made once, in
the background, after the worker's runner is ready (a training JVM must not slow the first driver on a
small machine): a short program does what a warm driver does at its start (worker/driver.py) in a JVM
started with ``-XX:ArchiveClassesAtExit`` into a temporary file, then renamed into place — a worker never
sees a half-written archive. An exclusive lock lets one worker of a machine make it while others go on
without. Until it exists JVMs start without it, as before; one deleted while the worker runs (a cache emptied
by hand) is made again at the next JVM's start. A JVM that does not map it (it says "Unable
to use shared archive" and starts without) gets it never again from this worker: that is logged once.

It is made only where its file system has :data:`ROOM_BYTES` free (a ~150 MB archive must not be what
fills the disk); a failed write (a full disk) is logged once and leaves no file. Each worker that starts
with an archive marks it used (its modification time); archives of other installations not used for
:data:`UNUSED_DAYS` (a Java or pyspark upgraded since) are deleted, so upgrades do not pile up ~150 MB each,
and so are, as old, the lock and log of a training that never made its archive.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping

from sparkyard.worker import archive_files, jvm_temp
from sparkyard.worker.archive_files import TRAINING_FILES, UNUSED_DAYS, lock_file, log_file, training_file
from sparkyard.worker.children import Children, die_with_parent
from sparkyard.worker.disk import free_space, no_space
from sparkyard.worker.jvm_temp import JAVA_OPTIONS
from sparkyard.worker.spark_home import spark_home as installed_spark_home

log = logging.getLogger(__name__)

ARCHIVE_OPTION = "-XX:SharedArchiveFile"
DUMP_OPTION = "-XX:ArchiveClassesAtExit"
# Options with which the JVM must not be given the archive (the user's own CDS choice wins).
OWN_CHOICE = (ARCHIVE_OPTION, DUMP_OPTION, "-Xshare:off")
# The setting's value that turns the archive off.
OFF = "off"
# Free space the archive's file system needs before one is made: the archive (~150 MB), with room to spare.
ROOM_BYTES = 1024 * 2**20
# How long a training JVM may take before it is given up (it takes ~16 s on a loaded 2-core machine).
TRAIN_TIMEOUT_S = 300.0
# A worker marks the archive it gives its JVMs as used at most this often (its modification time: what the
# 30-day rule of worker/archive_files.py reads), so a worker up for months keeps it while it starts JVMs.
MARK_EVERY_S = 3600.0


def default_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where archives are kept unless configured: the user's cache, shared by every worker of this user on
    the machine (one archive, made once, instead of ~150 MB per work directory)."""
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "sparkyard" / "class-archive"


def shaping_options(conf: Mapping[str, str], env: Mapping[str, str]) -> list[str]:
    """The JVM options that decide whether an archive fits a JVM: ``-X…`` options of the driver's conf and of
    ``JAVA_TOOL_OPTIONS`` (not logging, not the archive options themselves)."""
    words = f"{env.get('JAVA_TOOL_OPTIONS', '')} {conf.get(JAVA_OPTIONS, '')}".split()
    return [w for w in words if w.startswith("-X") and not w.startswith(("-Xlog", *OWN_CHOICE))]


def archive_name(java: str, spark_home: str, jars: Iterable[tuple[str, int]], options: Iterable[str]) -> str:
    """The archive's file name for a Java (``java``: its identity, :func:`java_identity`), a Spark
    installation (its path and its jars' names and sizes) and the shaping JVM options."""
    text = json.dumps([java, spark_home, sorted(jars), list(options)])
    return f"spark-{hashlib.sha256(text.encode()).hexdigest()[:20]}.jsa"


def java_identity(env: Mapping[str, str]) -> str:
    """The Java that ``spark-submit`` runs (``$JAVA_HOME/bin/java``, else ``java`` on PATH, as spark-class
    finds it): its real path, and the size and time of its ``libjvm.so`` and ``release`` file ('' if none)."""
    home = env.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java", path=env.get("PATH"))
    if not found or not os.path.exists(found):
        return ""
    java = Path(found).resolve()
    parts = [str(java)]
    for name in ("lib/server/libjvm.so", "release"):
        try:
            st = (java.parent.parent / name).stat()
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{name}:-")
    return ";".join(parts)


def spark_jars(spark_home: Path) -> list[tuple[str, int]]:
    try:
        return [(p.name, p.stat().st_size) for p in (spark_home / "jars").iterdir()]
    except OSError:
        return []


def with_option(conf: Mapping[str, str], option: str) -> dict[str, str]:
    """``conf`` with ``option`` added to the driver's Java options (after the user's, which stay), unless those
    options make their own CDS choice."""
    out = dict(conf)
    current = out.get(JAVA_OPTIONS, "")
    if not any(choice in current for choice in OWN_CHOICE):
        out[JAVA_OPTIONS] = f"{current} {option}".strip()
    return out


def maps_file(pid: int, path: Path) -> bool:
    """Whether process ``pid`` or one of its descendants has ``path`` mapped (the JVM under a driver)."""
    target = str(path)
    pending, seen = [pid], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/maps", errors="replace") as maps:
                if any(line.rstrip("\n").endswith(target) for line in maps):
                    return True
        except OSError:
            continue
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as kids:
                    pending.extend(int(k) for k in kids.read().split())
        except OSError:
            continue
    return False


class ClassArchive:
    """The archive of this worker's Java, Spark installation and driver conf: its path, whether JVMs may be
    given it, and its making. ``directory`` None: no archive at all (the setting's ``off``)."""

    def __init__(self, directory: Path | None, conf: Mapping[str, str], children: Children, *,
                 env: Mapping[str, str] = os.environ, spark_home: Path | None = None,
                 free: Callable[[Path], tuple[int, int]] = free_space) -> None:
        self.directory = directory
        self._conf = dict(conf)
        self._children = children  # the worker's: a training JVM is one of them
        self._env = dict(env)
        self._spark_home = spark_home
        self._free = free
        self._path: Path | None = None
        self.rejected = ""  # why JVMs no longer get it ('' while they may)
        self.verified = False  # a JVM was seen mapping it
        self._making: asyncio.Task[None] | None = None
        self._sought = False  # a runner was warm and asked for it: from then on a missing one is made again
        self._marked_at: float | None = None  # monotonic time this worker last marked it, on giving it to a JVM

    @classmethod
    def configured(cls, setting: str, conf: Mapping[str, str], children: Children) -> ClassArchive:
        """The archive the worker's ``class_archive_dir`` setting asks for ('' default, ``off`` none)."""
        if setting.strip().lower() == OFF:
            return cls(None, conf, children)
        return cls(Path(setting).expanduser() if setting else default_dir(), conf, children)

    @property
    def path(self) -> Path | None:
        """The archive's path (computed once: it reads the Java and Spark installations), None when off."""
        if self.directory is None:
            return None
        if self._path is None:
            home = self._spark_home or installed_spark_home()
            java = java_identity(self._env)
            if not java:
                self.directory = None  # no Java: nothing will start a JVM from it
                return None
            name = archive_name(java, str(home.resolve()), spark_jars(home), shaping_options(self._conf, self._env))
            self._path = self.directory / name
        return self._path

    def usable(self) -> Path | None:
        """The archive a JVM starting now may be given: made, and not refused by a JVM."""
        path = self.path
        return path if path is not None and not self.rejected and path.is_file() else None

    def conf(self, conf: Mapping[str, str]) -> tuple[dict[str, str], Path | None]:
        """``conf`` with the archive for the driver's JVM, when there is one to give; and that archive. One
        gone since it was sought (deleted while the worker runs) is made again for the JVMs after this one."""
        path = self.usable()
        if path is None:
            if self._sought:
                self.make_soon()
            return dict(conf), None
        out = with_option(conf, f"{ARCHIVE_OPTION}={path}")
        if out.get(JAVA_OPTIONS) == conf.get(JAVA_OPTIONS):  # the user's own CDS choice stands
            return out, None
        self._mark(path)
        return out, path

    def _mark(self, path: Path) -> None:
        """The archive is given to a JVM: mark it used, at most every :data:`MARK_EVERY_S` (a worker marked it
        only when its runner was first ready, so the 30-day rule could take the archive of one up longer)."""
        now = time.monotonic()
        if self._marked_at is not None and now - self._marked_at < MARK_EVERY_S:
            return
        self._marked_at = now
        try:
            os.utime(path)
        except OSError as exc:
            log.debug("class archive %s not marked: %s", path, exc)

    def check(self, pid: int, path: Path) -> None:
        """A JVM under ``pid`` started with the archive ``path`` and is ready: if it did not map it, the JVM
        refused it (another Java or class path than its key says): logged once and never given again."""
        if self.verified or self.rejected or path != self.path:
            return
        if maps_file(pid, path):
            self.verified = True
            log.info("Spark JVMs start from the class archive %s", path)
        else:
            self.refuse("a JVM started with it did not use it (see its log for the JVM's reason)")

    def refuse(self, why: str) -> None:
        if not self.rejected:
            self.rejected = why
            log.warning("class archive %s is not used: %s", self.path, why)

    def room(self) -> str:
        """Why no archive may be made in its directory now ('' when it may)."""
        assert self.directory is not None
        try:
            free, _ = self._free(self.directory)
        except OSError as exc:
            return f"its directory cannot be measured ({exc})"
        if free < ROOM_BYTES:
            return f"{free / 2**20:.0f} MiB free in {self.directory}, {ROOM_BYTES / 2**20:.0f} MiB needed"
        return ""

    def make_soon(self) -> None:
        """Make the archive in the background unless it exists, is being made, or cannot be (a training JVM is
        one of the worker's children: one left by a killed worker is ended at its restart)."""
        self._sought = True
        if (self._making is not None and not self._making.done()) or self.rejected or self.path is None:
            return
        self.prune()
        if self.path.is_file():
            return
        self._making = asyncio.create_task(self._make(), name="class-archive")

    def prune(self, now: float | None = None) -> None:
        """Mark this worker's archive used, and delete what no worker has used for :data:`UNUSED_DAYS` and what
        trainings that no longer run left (worker/archive_files.py). A JVM that maps a deleted one keeps its
        pages; a worker that wants one again makes it anew."""
        path = self.path
        if path is None or self.directory is None:
            return
        now = time.time() if now is None else now
        try:
            if path.is_file():
                os.utime(path, (now, now))
        except OSError as exc:
            log.debug("class archives in %s not looked at: %s", self.directory, exc)
            return
        archive_files.prune(self.directory, path, now)

    async def _make(self) -> None:
        path = self.path
        assert path is not None and self.directory is not None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            lock = open(lock_file(path), "w")
        except OSError as exc:
            self.refuse(f"its directory cannot be written ({exc})")
            return
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                log.info("class archive %s is being made by another worker", path)
                return
            if path.is_file():
                return
            problem = self.room()
            if problem:
                self.refuse(f"not made: {problem}")
                return
            await self._train(path)

    async def _train(self, path: Path) -> None:
        temporary, scratch = (training_file(path, kind) for kind in TRAINING_FILES)  # the dump; the JVM's temp files
        log.info("making the class archive %s in the background", path)
        conf = jvm_temp.temp_conf(with_option(self._conf, f"{DUMP_OPTION}={temporary}"), scratch)
        env = {**self._env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               jvm_temp.DIRECTORY_ENV: str(scratch)}
        log_path = log_file(path)
        try:
            with open(log_path, "wb") as logf:
                proc = await self._children.spawn(
                    sys.executable, "-m", "sparkyard.worker.class_archive", str(os.getpid()), json.dumps(conf),
                    what="class archive training", stdin=asyncio.subprocess.DEVNULL, stdout=logf,
                    stderr=asyncio.subprocess.STDOUT, env=env, cwd=scratch)
            try:
                code: int | None = await asyncio.wait_for(proc.wait(), TRAIN_TIMEOUT_S)
            except asyncio.TimeoutError:
                code = None
            finally:  # ended (or cancelled: the worker stops): its group goes, with any JVM it left
                Children.kill_group(proc.pid)
                if proc.returncode is not None:
                    self._children.forget(proc.pid)
            if code != 0 or not temporary.is_file() or temporary.stat().st_size == 0:
                how = f"exited with {code}" if code is not None else f"took over {TRAIN_TIMEOUT_S:.0f}s"
                self.refuse(f"not made: its training JVM {how} (log: {log_path})")
                return
            os.replace(temporary, path)
            log_path.unlink(missing_ok=True)  # kept only when the training failed
            log.info("class archive %s made (%.0f MB)", path, path.stat().st_size / 1e6)
        except OSError as exc:
            self.refuse(f"not made: {'no space left' if no_space(exc) else exc}")
        finally:
            temporary.unlink(missing_ok=True)
            await asyncio.to_thread(jvm_temp.remove, scratch)

    async def close(self) -> None:
        if self._making is not None and not self._making.done():
            self._making.cancel()
            try:
                await self._making
            except asyncio.CancelledError:
                pass


def train(conf: dict[str, str], worker_pid: int) -> int:
    """The training program: start a driver's JVM as a warm driver does (worker/driver.py), then end it and
    wait for its exit, at which the JVM writes the archive. It dies with the worker that started it: a training
    left to run on would go on to write its archive where nothing renames it (the next worker to look at the
    directory deletes what a killed one left: :meth:`ClassArchive.prune`)."""
    from sparkyard.worker.compat import SharedSpark
    from sparkyard.worker.driver import DRIVER_CONF

    die_with_parent(worker_pid)
    os.nice(10)  # in the background: the worker's own drivers and attempts come first
    shared = SharedSpark.build("local[1]", {**DRIVER_CONF, **conf}, warm=True)
    context = shared.root.sparkContext
    gateway_proc = context._gateway.proc  # the JVM (spark-submit execs it)
    shared.root.stop()
    gateway_proc.stdin.close()  # the gateway JVM exits at the end of its input, writing the archive
    return gateway_proc.wait()


if __name__ == "__main__":  # python -m sparkyard.worker.class_archive WORKER_PID CONF_JSON
    sys.exit(train(json.loads(sys.argv[2]), int(sys.argv[1])))
