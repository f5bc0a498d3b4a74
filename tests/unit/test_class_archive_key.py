"""The class archive's key, path, JVM options and making (worker/class_archive.py), without a child process: the
training JVM is a stand-in that writes (or fails to write) the file the JVM would."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from sparkyard.worker import class_archive
from sparkyard.worker.class_archive import (
    DUMP_OPTION,
    ROOM_BYTES,
    ClassArchive,
    archive_name,
    default_dir,
    shaping_options,
    with_option,
)

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
ROOMY = (10 * ROOM_BYTES, 1000)


def fake_install(tmp_path: Path, jar_size: int = 10) -> tuple[Path, dict[str, str]]:
    """A Spark home with one jar and a Java home; the environment that finds that Java."""
    spark = tmp_path / "spark"
    (spark / "jars").mkdir(parents=True, exist_ok=True)
    jar = spark / "jars" / "spark-core_2.13-4.0.0.jar"
    if not jar.exists() or jar.stat().st_size != jar_size:
        jar.write_bytes(b"x" * jar_size)
    java = tmp_path / "jdk"
    if not java.exists():
        (java / "bin").mkdir(parents=True)
        (java / "lib" / "server").mkdir(parents=True)
        (java / "bin" / "java").write_text("")
        (java / "lib" / "server" / "libjvm.so").write_bytes(b"jvm")
        (java / "release").write_text('JAVA_VERSION="17.0.15"\n')
    return spark, {"JAVA_HOME": str(java), "HOME": str(tmp_path / "home")}


def archive(tmp_path: Path, conf: dict[str, str] | None = None, free: tuple[int, int] = ROOMY,
            jar_size: int = 10, env: dict[str, str] | None = None, children: Any = None) -> ClassArchive:
    spark, found = fake_install(tmp_path, jar_size)
    return ClassArchive(tmp_path / "cache", conf or {}, children or FakeChildren(), env={**found, **(env or {})},
                        spark_home=spark, free=lambda _: free)


def test_the_name_changes_with_the_java_the_spark_jars_their_place_and_the_shaping_options() -> None:
    base = archive_name("/jdk17/bin/java;libjvm:1:2", "/venv/pyspark", [("spark-core.jar", 10)], ["-XX:+UseSerialGC"])
    assert base.startswith("spark-") and base.endswith(".jsa")
    assert base == archive_name("/jdk17/bin/java;libjvm:1:2", "/venv/pyspark", [("spark-core.jar", 10)],
                                ["-XX:+UseSerialGC"])
    others = {
        archive_name("/jdk21/bin/java;libjvm:1:2", "/venv/pyspark", [("spark-core.jar", 10)], ["-XX:+UseSerialGC"]),
        archive_name("/jdk17/bin/java;libjvm:1:2", "/other/pyspark", [("spark-core.jar", 10)], ["-XX:+UseSerialGC"]),
        archive_name("/jdk17/bin/java;libjvm:1:2", "/venv/pyspark", [("spark-core.jar", 11)], ["-XX:+UseSerialGC"]),
        archive_name("/jdk17/bin/java;libjvm:1:2", "/venv/pyspark", [("spark-core.jar", 10)], ["-XX:+UseG1GC"]),
    }
    assert base not in others and len(others) == 4


def test_shaping_options_are_the_x_options_of_the_tool_options_and_the_driver_conf() -> None:
    conf = {JAVA_OPTIONS: "-XX:+UseSerialGC -Djava.io.tmpdir=/t -Xlog:cds -XX:SharedArchiveFile=/a.jsa -Xmx2g"}
    env = {"JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -Dfoo=bar"}
    assert shaping_options(conf, env) == ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx2g"]


def test_the_path_follows_the_installation_and_the_conf(tmp_path: Path) -> None:
    one = archive(tmp_path).path
    assert one is not None and one.parent == tmp_path / "cache"
    assert archive(tmp_path).path == one
    assert archive(tmp_path, jar_size=11).path != one  # another pyspark
    archive(tmp_path)  # the jar as it was
    assert archive(tmp_path, {JAVA_OPTIONS: "-XX:+UseSerialGC"}).path != one
    assert archive(tmp_path, env={"JAVA_TOOL_OPTIONS": "-XX:+UseSerialGC"}).path != one
    (tmp_path / "jdk" / "lib" / "server" / "libjvm.so").write_bytes(b"another jvm")
    assert archive(tmp_path).path != one  # another Java build at the same place


def test_no_java_no_archive(tmp_path: Path) -> None:
    spark, _ = fake_install(tmp_path)
    nothing = ClassArchive(tmp_path / "cache", {}, FakeChildren(), env={"JAVA_HOME": str(tmp_path / "none")},
                           spark_home=spark)
    assert nothing.path is None and nothing.conf({"a": "b"}) == ({"a": "b"}, None)


def test_the_setting_default_is_the_users_cache_and_off_is_none(tmp_path: Path) -> None:
    assert default_dir({"HOME": "/home/u"}) == Path("/home/u/.cache/sparkyard/class-archive")
    assert default_dir({"HOME": "/home/u", "XDG_CACHE_HOME": "/c"}) == Path("/c/sparkyard/class-archive")
    assert ClassArchive.configured("off", {}, FakeChildren()).directory is None
    assert ClassArchive.configured("OFF", {}, FakeChildren()).path is None
    assert ClassArchive.configured(str(tmp_path), {}, FakeChildren()).directory == tmp_path


def test_the_option_goes_after_the_users_java_options_unless_they_make_their_own_cds_choice() -> None:
    assert with_option({}, "-XX:SharedArchiveFile=/a.jsa") == {JAVA_OPTIONS: "-XX:SharedArchiveFile=/a.jsa"}
    user = {JAVA_OPTIONS: "-Dmine=1 -XX:+UseSerialGC", "spark.x": "y"}
    assert with_option(user, "-XX:SharedArchiveFile=/a.jsa") == {
        JAVA_OPTIONS: "-Dmine=1 -XX:+UseSerialGC -XX:SharedArchiveFile=/a.jsa", "spark.x": "y"}
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/mine.jsa", "-XX:ArchiveClassesAtExit=/x.jsa"):
        assert with_option({JAVA_OPTIONS: own}, "-XX:SharedArchiveFile=/a.jsa") == {JAVA_OPTIONS: own}


def test_jvms_get_the_archive_only_once_it_exists_and_never_after_a_jvm_refused_it(tmp_path: Path) -> None:
    cds = archive(tmp_path)
    user = {JAVA_OPTIONS: "-Dmine=1"}
    assert cds.conf(user) == (user, None)
    assert cds.path is not None
    cds.path.parent.mkdir(parents=True)
    cds.path.write_bytes(b"archive")
    conf, given = cds.conf(user)
    assert given == cds.path and conf[JAVA_OPTIONS] == f"-Dmine=1 -XX:SharedArchiveFile={cds.path}"
    assert cds.conf({JAVA_OPTIONS: "-Xshare:off"}) == ({JAVA_OPTIONS: "-Xshare:off"}, None)
    cds.check(os.getpid(), cds.path)  # this process has not mapped it: the JVM refused it
    assert cds.rejected and cds.conf(user) == (user, None)


def test_giving_the_archive_to_a_jvm_marks_it_used_at_most_hourly(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker marked its archive only when its runner was first ready: one up for more than 30 days had it
    deleted by another worker's prune while its JVMs still started from it."""
    cds = archive(tmp_path)
    assert cds.path is not None
    cds.path.parent.mkdir(parents=True)
    cds.path.write_bytes(b"archive")
    old = time.time() - 40 * 86_400
    os.utime(cds.path, (old, old))
    clock = [1000.0]
    monkeypatch.setattr(class_archive.time, "monotonic", lambda: clock[0])
    assert cds.conf({})[1] == cds.path
    assert cds.path.stat().st_mtime > old + 39 * 86_400  # marked now
    os.utime(cds.path, (old, old))
    clock[0] += class_archive.MARK_EVERY_S / 2
    cds.conf({})
    assert cds.path.stat().st_mtime == old  # not again within the hour
    clock[0] += class_archive.MARK_EVERY_S
    cds.conf({})
    assert cds.path.stat().st_mtime > old + 39 * 86_400


def test_a_jvm_that_maps_the_archive_verifies_it(tmp_path: Path) -> None:
    import mmap

    cds = archive(tmp_path)
    assert cds.path is not None
    cds.path.parent.mkdir(parents=True)
    cds.path.write_bytes(b"a" * 4096)
    with open(cds.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ):
        cds.check(os.getpid(), cds.path)
    assert cds.verified and not cds.rejected


class FakeProc:
    def __init__(self, code: int) -> None:
        self.pid = 2**22 + 7  # no such process: killing its group does nothing
        self.returncode: int | None = None
        self._code = code

    async def wait(self) -> int:
        self.returncode = self._code
        return self._code


class FakeChildren:
    """Children whose spawned training JVM writes ``content`` where the dump option says, and exits ``code``."""

    def __init__(self, content: bytes = b"archive", code: int = 0) -> None:
        self.content, self.code = content, code
        self.spawned: list[dict[str, str]] = []
        self.forgotten: list[int] = []

    async def spawn(self, *cmd: str, what: str, **kwargs: Any) -> FakeProc:
        conf = json.loads(cmd[-1])
        self.spawned.append(conf)
        dump = next(w for w in conf[JAVA_OPTIONS].split() if w.startswith(DUMP_OPTION)).split("=", 1)[1]
        if self.content:
            Path(dump).write_bytes(self.content)
        return FakeProc(self.code)

    def forget(self, pid: int) -> None:
        self.forgotten.append(pid)


async def make(cds: ClassArchive) -> None:
    cds.make_soon()
    assert cds._making is not None
    await cds._making


async def test_the_archive_appears_whole_under_its_name_once_the_training_jvm_exits(tmp_path: Path) -> None:
    children = FakeChildren()
    cds = archive(tmp_path, {JAVA_OPTIONS: "-XX:+UseSerialGC"}, children=children)
    await make(cds)
    assert cds.path is not None and cds.path.read_bytes() == b"archive"
    assert [p.name for p in cds.path.parent.iterdir() if p.suffix in (".tmp", ".jvm")] == []
    options = children.spawned[0][JAVA_OPTIONS].split()
    assert options[0] == "-XX:+UseSerialGC" and any(o.startswith(DUMP_OPTION) for o in options)
    assert children.forgotten == [FakeProc(0).pid]
    cds.make_soon()
    assert len(children.spawned) == 1  # made once


@pytest.mark.parametrize("children", [FakeChildren(code=1), FakeChildren(content=b"")])
async def test_a_failed_training_leaves_no_file_and_is_not_tried_again(tmp_path: Path,
                                                                      children: FakeChildren) -> None:
    cds = archive(tmp_path, children=children)
    await make(cds)
    assert cds.path is not None and not cds.path.exists() and "not made" in cds.rejected
    assert [p.name for p in cds.path.parent.iterdir() if p.suffix == ".tmp"] == []
    cds.make_soon()
    assert len(children.spawned) == 1


async def test_an_archive_deleted_while_the_worker_runs_is_made_again_at_the_next_jvm_start(
        tmp_path: Path) -> None:
    """Before, a worker made its archive once: one deleted by hand (a cache emptied) while the worker ran was
    never made again, and every JVM until the worker's restart started without it."""
    children = FakeChildren()
    cds = archive(tmp_path, children=children)
    assert cds.conf({}) == ({}, None)  # the first warm-up: nothing made, not to slow it
    assert cds._making is None and children.spawned == []
    await make(cds)  # the runner is warm
    assert cds.path is not None and cds.path.is_file() and cds.conf({})[1] == cds.path
    cds.path.unlink()
    assert cds.conf({}) == ({}, None)  # this JVM starts without it ...
    assert cds._making is not None
    await cds._making
    assert cds.path.is_file() and len(children.spawned) == 2
    assert cds.conf({})[1] == cds.path  # ... the next one with it


async def test_a_full_disk_is_not_filled_by_an_archive(tmp_path: Path) -> None:
    children = FakeChildren()
    cds = archive(tmp_path, free=(ROOM_BYTES - 1, 1000), children=children)
    await make(cds)
    assert children.spawned == [] and "MiB needed" in cds.rejected


async def test_a_write_refused_for_space_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(class_archive.os, "replace", refused)
    cds = archive(tmp_path)
    await make(cds)
    assert cds.path is not None and not cds.path.exists() and "no space left" in cds.rejected
    assert [p.name for p in cds.path.parent.iterdir() if p.suffix == ".tmp"] == []


async def test_one_worker_makes_it_while_another_holds_the_lock(tmp_path: Path) -> None:
    children = FakeChildren()
    cds = archive(tmp_path, children=children)
    assert cds.path is not None
    cds.path.parent.mkdir(parents=True)
    with open(cds.path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        await make(cds)
        assert children.spawned == [] and not cds.rejected  # the other worker's archive is used when it exists
    await make(cds)  # asked again once the other let go of the lock without making it
    assert cds.path.is_file()


async def test_close_ends_a_training_in_progress(tmp_path: Path) -> None:
    class Slow(FakeChildren):
        async def spawn(self, *cmd: str, what: str, **kwargs: Any) -> FakeProc:
            proc = await super().spawn(*cmd, what=what, **kwargs)

            async def forever() -> int:
                await asyncio.Event().wait()
                return 0

            proc.wait = forever  # type: ignore[method-assign]
            return proc

    cds = archive(tmp_path, children=Slow())
    cds.make_soon()
    await asyncio.sleep(0.05)
    await cds.close()
    assert cds.path is not None and not cds.path.exists()
    assert [p.name for p in cds.path.parent.iterdir() if p.suffix == ".tmp"] == []


def test_an_archive_no_worker_started_with_for_30_days_is_deleted_and_the_one_in_use_is_marked(
        tmp_path: Path) -> None:
    made = archive(tmp_path)
    current = made.path
    assert current is not None
    current.parent.mkdir(parents=True)
    current.write_bytes(b"jsa")
    stale, recent = current.with_name("spark-old.jsa"), current.with_name("spark-other.jsa")
    for path in (stale, stale.with_suffix(".lock"), stale.with_name("spark-old.jsa.log"), recent):
        path.write_bytes(b"x")
    now = 1_900_000_000.0
    days = 86_400
    os.utime(current, (now - 90 * days, now - 90 * days))  # in use: marked, however old it was
    os.utime(stale, (now - 31 * days, now - 31 * days))
    os.utime(recent, (now - 29 * days, now - 29 * days))  # another installation's, used lately
    made.prune(now)
    assert sorted(p.name for p in current.parent.iterdir()) == sorted([current.name, recent.name])
    assert current.stat().st_mtime == now


def test_the_lock_and_log_of_a_training_that_never_made_its_archive_go_after_30_days(tmp_path: Path) -> None:
    """A training that failed or was stopped leaves its name's lock and log and no archive; before, only names
    with an archive were ever deleted, so every such training's two files stayed."""
    made = archive(tmp_path)
    assert made.path is not None
    cache = made.path.parent
    cache.mkdir(parents=True)
    now = 1_900_000_000.0
    days = 86_400
    ages = {"spark-gone": 31, "spark-lately": 29}
    for name, age in ages.items():
        for path in (cache / f"{name}.lock", cache / f"{name}.jsa.log"):
            path.write_bytes(b"x")
            os.utime(path, (now - age * days, now - age * days))
    lone_lock = cache / "spark-lock-only.lock"  # a training stopped before it wrote its log
    lone_lock.write_bytes(b"")
    os.utime(lone_lock, (now - 40 * days, now - 40 * days))
    held = cache / "spark-held.lock"  # as old, but a worker holds its lock: it is making that archive now
    held.write_bytes(b"")
    os.utime(held, (now - 40 * days, now - 40 * days))
    with open(held) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made.prune(now)
    assert sorted(p.name for p in cache.iterdir()) == ["spark-held.lock", "spark-lately.jsa.log", "spark-lately.lock"]


def test_what_a_training_that_no_longer_runs_left_is_deleted_and_a_running_ones_is_kept(tmp_path: Path) -> None:
    """A worker killed with -9 mid-training leaves the training's scratch directory and, once the orphaned JVM
    exits, a whole archive under a temporary name; a training that runs holds its archive's lock."""
    made = archive(tmp_path)
    assert made.path is not None
    cache = made.path.parent
    cache.mkdir(parents=True)
    dead = [cache / "spark-dead.jsa.4242.tmp", cache / "spark-dead.jsa.4242.jvm"]
    running = [cache / "spark-busy.jsa.4343.tmp", cache / "spark-busy.jsa.4343.jvm"]
    kept = [cache / "spark-dead.jsa", cache / "spark-dead.jsa.log", cache / "spark-busy.lock"]
    for files in (dead, running):
        files[0].write_bytes(b"half an archive")
        files[1].mkdir()
        (files[1] / "hsperfdata").write_bytes(b"x")
    for path in kept:
        path.write_bytes(b"x")
    with open(cache / "spark-busy.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made.prune()
    names = {p.name for p in cache.iterdir()}
    assert not names & {p.name for p in dead}
    assert {p.name for p in running + kept} <= names
