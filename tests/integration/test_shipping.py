"""Code shipping through a real master and Redis: uploaded once, fetched by workers, limited in size,
collected when no job needs it any more."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import AsyncIterator

import pytest
from redis.asyncio import Redis

from harness import Cluster, RedisServer, wait_for
from sparkyard.bundle import CHUNK_BYTES
from sparkyard.client import first_run_id
from sparkyard.keys import Keys
from sparkyard.master.bundles import BundleStore
from sparkyard.master.redis_bundles import RedisBundles
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.scripts import Fenced, ScriptLibrary
from sparkyard.v1 import sparkyard_pb2 as pb

JOB = "import os, sys\nfrom helper import GREETING\n\ndef main(spark, ctx):\n    return [GREETING, os.getcwd()]\n"


def _project(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "job.py").write_text(JOB)
    (root / "helper.py").write_text("GREETING = 'hello from the bundle'\n")
    return root


def _bundles(redis_server: RedisServer, namespace: str) -> list[str]:
    return list(redis_server.client().zrange(Keys(namespace).bundles, 0, -1))


def test_a_shipped_job_runs_from_its_bundle_and_a_resubmit_uploads_nothing(
        shared_cluster: Cluster, redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path / "proj")
    monkeypatch.chdir(project)
    client = shared_cluster.client()
    job = client.submit("job.py:main", bundle=".")
    assert job.spec.bundle.digest and job.spec.entrypoint == "job.py:main"
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED, run
    greeting, cwd = json.loads(run.tasks[0].result_json)
    assert greeting == "hello from the bundle"
    assert cwd == str(project)  # same machine: the submit directory holds the entrypoint
    assert shared_cluster.master is not None
    stored = f"bundle {job.spec.bundle.digest[:12]} stored"
    again = client.submit("job.py:main", bundle=".")
    assert again.spec.bundle.digest == job.spec.bundle.digest
    assert shared_cluster.master.log().count(stored) == 1  # the second submit asked, and uploaded nothing
    assert client.wait(first_run_id(again), timeout=120)[0].state == pb.RUN_SUCCEEDED
    assert job.spec.bundle.digest in _bundles(redis_server, shared_cluster.namespace)


UDF_JOB = """\
import os

from pyspark.sql.functions import udf

import helper  # the driver's, from the bundle root (this file is in jobs/)


def greeting(_):
    import helper  # in Spark's Python worker, from the bundle's archive on its sys.path

    return helper.GREETING


def main(spark, ctx):
    return [helper.GREETING, spark.range(1).select(udf(greeting)("id")).collect()[0][0], os.getpid()]
"""


def test_each_attempt_of_a_warm_driver_gives_its_udfs_its_own_bundle(
        shared_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = shared_cluster.client()
    projects = {}
    for name in ("one", "two"):
        projects[name] = _project(tmp_path / name)
        (projects[name] / "jobs").mkdir()
        (projects[name] / "jobs" / "job.py").write_text(UDF_JOB)
        (projects[name] / "helper.py").write_text(f"GREETING = {name!r}\n")
    seen = []
    for name in ("one", "two", "one"):  # the same module names in both bundles, one after the other
        monkeypatch.chdir(projects[name])
        job = client.submit("jobs/job.py:main", bundle=".", routing="consistent-hash", routing_key="udf")
        run, _ = client.wait(first_run_id(job), timeout=120)
        assert run.state == pb.RUN_SUCCEEDED, run
        seen.append(json.loads(run.tasks[0].result_json))
    assert [(driver_side, udf_side) for driver_side, udf_side, _ in seen] == [("one", "one"), ("two", "two"),
                                                                             ("one", "one")]
    assert len({pid for _, _, pid in seen}) == 1  # one driver ran all three: the isolation was tested


SHIPPED_JOB = """\
import os

from pyspark import SparkFiles
from pyspark.sql.functions import udf


def shipped(_):
    import zipped  # from deps.zip, a --py-files archive, on the executor's sys.path

    path = SparkFiles.get("lookup.txt")  # a --files entry, where Spark put it for the executor
    return [zipped.MARK, open(path).read().strip() if os.path.exists(path) else None]


def main(spark, ctx):
    return [*spark.range(1).select(udf(shipped, "array<string>")("id")).collect()[0][0], os.getpid()]
"""


def test_a_warm_driver_ships_each_attempt_its_own_py_files_archives_and_files(
        shared_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = shared_cluster.client()

    def run(name: str, *, with_file: bool) -> list[object]:
        project = tmp_path / name
        project.mkdir()
        (project / "job.py").write_text(SHIPPED_JOB)
        (project / "lookup.txt").write_text(f"{name}.txt\n")
        with zipfile.ZipFile(project / "deps.zip", "w") as deps:  # the same name in every project
            deps.writestr("zipped.py", f"MARK = {name!r}\n")
        monkeypatch.chdir(project)
        job = client.submit("job.py:main", py_files=["deps.zip"], files=["lookup.txt"] if with_file else None,
                            routing="consistent-hash", routing_key="shipped")  # one worker, two warm drivers
        done, _ = client.wait(first_run_id(job), timeout=120)
        assert done.state == pb.RUN_SUCCEEDED, done
        result: list[object] = json.loads(done.tasks[0].result_json)
        return result

    one, two, three = (run(name, with_file=True) for name in ("one", "two", "three"))
    assert [one[:2], two[:2], three[:2]] == [["one", "one.txt"], ["two", "two.txt"], ["three", "three.txt"]]
    # Both drivers serve another lookup.txt by then: the third ran on a fresh driver, not on the others' files.
    assert one[2] != two[2] and three[2] not in (one[2], two[2])
    four, five = (run(name, with_file=False) for name in ("four", "five"))
    assert [four[0], five[0]] == ["four", "five"]
    assert four[2] == five[2]  # one driver, two archives named deps.zip, each attempt importing its own


def test_a_bundle_over_the_limit_is_refused_with_the_limit_named(make_cluster: object, tmp_path: Path) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master("--max-bundle", "2k")
    project = _project(tmp_path / "proj")
    (project / "big.bin").write_bytes(os.urandom(8192))
    done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "submit", "job.py:main", "--bundle", ".",
                           "--master", cluster.address], cwd=project, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "over the master's limit of 2.0 KiB" in lines[0] and "--max-bundle" in lines[0]


def test_a_bundle_is_collected_once_no_job_needs_it(make_cluster: object, redis_server: RedisServer,
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master()
    client = cluster.client()
    monkeypatch.chdir(_project(tmp_path / "once"))
    one_shot = client.submit("job.py:main", bundle=".", delay="1h")
    monkeypatch.chdir(_project(tmp_path / "cron"))
    (tmp_path / "cron" / "helper.py").write_text("GREETING = 'another'\n")
    recurring = client.submit("job.py:main", bundle=".", cron="0 3 * * *")

    async def collect() -> list[str]:
        redis = Redis(port=redis_server.port)
        keys = Keys(cluster.namespace)
        scripts = ScriptLibrary(Redis(port=redis_server.port, decode_responses=True), keys)
        scripts.epoch = int(await redis.get(keys.epoch))  # collect as the leading master would
        try:
            return await BundleStore(RedisBundles(redis, keys, scripts), 1 << 20).collect()
        finally:
            await redis.aclose()

    assert asyncio.run(collect()) == []  # both jobs may still fire
    client.cancel(one_shot.id)
    wait_for(lambda: client.job(one_shot.id).state == pb.JOB_CANCELLED, 30, "the cancel")
    assert asyncio.run(collect()) == [one_shot.spec.bundle.digest]
    assert _bundles(redis_server, cluster.namespace) == [recurring.spec.bundle.digest]


async def _chunks(ref: pb.BundleRef, data: bytes) -> AsyncIterator[pb.BundleChunk]:
    yield pb.BundleChunk(ref=ref, data=data[:CHUNK_BYTES])
    for start in range(CHUNK_BYTES, len(data), CHUNK_BYTES):
        yield pb.BundleChunk(data=data[start:start + CHUNK_BYTES])


async def test_an_upload_is_written_by_fenced_scripts_only_and_a_deposed_master_stores_nothing(
        redis_store: RedisStore, redis_server: RedisServer) -> None:
    blobs = Redis(port=redis_server.port)
    keys = redis_store.keys
    bundles = BundleStore(RedisBundles(blobs, keys, redis_store.scripts), 4 * CHUNK_BYTES)
    data = os.urandom(CHUNK_BYTES + 10)
    ref = pb.BundleRef(digest=hashlib.sha256(data).hexdigest(), size=len(data))
    try:
        epoch = redis_store.scripts.epoch
        redis_store.scripts.epoch = epoch + 1  # as a leader that was deposed meanwhile
        with pytest.raises(Fenced):
            await bundles.upload(_chunks(ref, data))
        assert await redis_store.redis.keys(f"{keys.bundle(ref.digest)}*") == []
        redis_store.scripts.epoch = epoch
        assert await bundles.upload(_chunks(ref, data)) == ref
        assert b"".join([c.data async for c in bundles.fetch(ref)]) == data
        assert await redis_store.redis.keys(f"{keys.bundle(ref.digest)}*") == [keys.bundle(ref.digest)]
        assert await redis_store.redis.zrange(keys.bundles, 0, -1) == [ref.digest]
    finally:
        await blobs.aclose()
