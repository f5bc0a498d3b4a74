"""Fenced output on a real filesystem: the lock, the compare-and-set on the fencing record, the atomic
publication, and the errors of bad use (worker/fenced_output.py); the fence desk's question and answer."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from sparkyard.startup import StartupError
from sparkyard.worker.fence_desk import FenceDesk, ask_worker
from sparkyard.worker.fenced_output import AttemptOutputs, FencedOutput, OutputError, StaleOutput, final_path
from sparkyard.worker.runner.base import Kill
from worker_rig import running_worker

CURRENT = lambda: (True, "")  # noqa: E731 - the worker's answer for an attempt that holds its token


def write(staging: str, text: str) -> None:
    os.makedirs(staging)
    Path(staging, "part-0").write_text(text)


def commit(final: Path, token: int, text: str, *, task: str = "t1") -> list[str]:
    outputs = AttemptOutputs()
    write(outputs.output(final, token), text)
    return outputs.commit(token, task, token, CURRENT)


def test_commit_publishes_atomically_as_a_symlink_and_records_the_token(tmp_path: Path) -> None:
    final = tmp_path / "out" / "daily"
    outputs = AttemptOutputs()
    staging = outputs.output(final, 7)
    assert not os.path.exists(staging) and Path(staging).parent.is_dir()  # Spark's writer creates it
    write(staging, "seven")
    assert outputs.commit(7, "task-a", 2, CURRENT) == [str(final)]
    assert final.is_symlink() and (final / "part-0").read_text() == "seven"
    record = FencedOutput(final).record()
    assert (record.token, record.fence, record.task_id, record.attempt) == (7, 7, "task-a", 2)


def test_a_stale_token_is_refused_after_a_newer_one_published(tmp_path: Path) -> None:
    final = tmp_path / "daily"
    zombie = AttemptOutputs()
    write(zombie.output(final, 3), "zombie")
    commit(final, 5, "re-run")
    with pytest.raises(StaleOutput, match=r"token 3 is stale; attempt 5 of task t1 \(token 5\) has published"):
        zombie.commit(3, "t1", 3, CURRENT)
    assert (final / "part-0").read_text() == "re-run"
    with pytest.raises(StaleOutput, match="not staged: fencing token 4 is stale"):  # nor may it stage again
        AttemptOutputs().output(final, 4)


def test_a_newer_attempt_that_began_writing_fences_an_older_one_before_it_publishes(tmp_path: Path) -> None:
    final = tmp_path / "daily"
    zombie = AttemptOutputs()
    write(zombie.output(final, 3), "zombie")
    AttemptOutputs().output(final, 9)
    with pytest.raises(StaleOutput, match=r"a newer attempt \(token 9\) is writing it"):
        zombie.commit(3, "t1", 1, CURRENT)
    assert not os.path.lexists(final)


def test_the_same_token_may_publish_again_and_old_versions_are_swept(tmp_path: Path) -> None:
    final = tmp_path / "daily"
    commit(final, 4, "first")
    commit(final, 6, "second")
    commit(final, 6, "again")
    assert (final / "part-0").read_text() == "again"
    meta = FencedOutput(final).meta
    versions = sorted(p.name.split("-")[0] for p in meta.iterdir() if p.name.startswith("v"))
    assert versions == ["v6", "v6"]  # the current one and the one it replaced; v4 is gone
    assert list((meta / "staging").iterdir()) == []


def _committer(final: str, token: int, start: Barrier) -> None:
    start.wait()
    try:
        commit(Path(final), token, str(token))
    except StaleOutput:
        pass
    except FileNotFoundError:
        # Its staging directory was removed while it wrote: only a publication of a newer token does that
        # (the staging of attempts that can no longer publish goes), which a CI run saw once.
        assert FencedOutput(Path(final)).record().token > token


def test_concurrent_committers_leave_the_highest_token_published(tmp_path: Path) -> None:
    final = tmp_path / "daily"
    tokens = [11, 3, 17, 8, 14, 5]
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(len(tokens))
    procs = [ctx.Process(target=_committer, args=(str(final), t, start)) for t in tokens]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert (final / "part-0").read_text() == "17"
    assert FencedOutput(final).record().token == 17


def test_nothing_is_published_when_the_worker_does_not_confirm_the_token(tmp_path: Path) -> None:
    final = tmp_path / "daily"
    outputs = AttemptOutputs()
    write(outputs.output(final, 5), "x")
    with pytest.raises(StaleOutput, match=r"token 5 is not current \(lease lost\)"):
        outputs.commit(5, "t1", 1, lambda: (False, "lease lost"))
    assert not os.path.lexists(final)
    assert outputs.commit(5, "t1", 1, CURRENT) == [str(final)]  # a refusal publishes nothing: it may ask again


@pytest.mark.parametrize("path, message", [
    ("", "non-empty path"),
    ("s3://bucket/out", "object stores"),
    ("/", "filesystem root"),
    ("/data/x.sparkyard", "Sparkyard's own"),
    (42, "not int"),
])
def test_bad_paths_are_refused_naming_the_problem(path: object, message: str) -> None:
    with pytest.raises(OutputError, match=message):
        final_path(path)


def test_misuse_gets_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match=r"commit\(\) without ctx.output\(\)"):
        AttemptOutputs().commit(1, "t1", 1, CURRENT)
    (tmp_path / "plain").mkdir()
    with pytest.raises(OutputError, match="exists and was not published by ctx.commit"):
        AttemptOutputs().output(tmp_path / "plain", 1)
    outputs = AttemptOutputs()
    outputs.output(tmp_path / "a", 2)
    with pytest.raises(OutputError, match="overlaps"):
        outputs.output(tmp_path / "a" / "b", 2)
    with pytest.raises(OutputError, match="nothing was written"):
        outputs.commit(2, "t1", 1, CURRENT)
    done = AttemptOutputs()
    write(done.output(tmp_path / "c", 3), "c")
    done.commit(3, "t1", 1, CURRENT)
    with pytest.raises(OutputError, match="already called"):
        done.commit(3, "t1", 1, CURRENT)
    with pytest.raises(OutputError, match=r"output\(\) after ctx.commit\(\)"):
        done.output(tmp_path / "d", 3)
    (FencedOutput(tmp_path / "c").meta / "record.json").write_text('{"token": 3}')
    with pytest.raises(OutputError, match=r"fencing record .* cannot be read \(KeyError"):
        AttemptOutputs().output(tmp_path / "c", 4)


async def test_the_fence_desk_answers_one_question_per_connection(tmp_path: Path) -> None:
    async def answer(task_id: str, token: int) -> tuple[bool, str]:
        return token == 8, "" if token == 8 else f"{task_id} is at 8"

    desk = FenceDesk(f"\0sparkyard-test-{os.getpid()}-{tmp_path.name}", answer)
    await desk.start()
    try:
        with pytest.raises(StartupError, match="another worker running with this --work-dir"):
            await FenceDesk(desk.address, answer).start()
        assert await asyncio.to_thread(ask_worker, desk.address, "t1", 8) == (True, "")
        assert await asyncio.to_thread(ask_worker, desk.address, "t1", 7) == (False, "t1 is at 8")
        assert (await asyncio.to_thread(ask_worker, desk.address, "t1", -1))[1].startswith("bad question")
    finally:
        await desk.stop()
    current, reason = await asyncio.to_thread(ask_worker, desk.address, "t1", 8, 2.0)
    assert not current and "did not confirm" in reason
    assert ask_worker("", "t1", 8) == (False, "this context names no worker to confirm its fencing token with")


async def test_a_worker_says_not_current_for_attempts_it_knows_are_fenced_and_without_a_master(tmp_path: Path) -> None:
    clock, worker, execution = running_worker(tmp_path)
    assert await worker.link.answer_fence("t2", 5) == (False, "worker w1 no longer runs task t2 with fencing token 5")
    assert (await worker.link.answer_fence("t1", 4))[0] is False
    assert await worker.link.answer_fence("t1", 5) == (
        False, "the worker is not connected to a master to confirm the fencing token")
    clock.advance(worker.link.connection.terms.lease_s)
    assert (await worker.link.answer_fence("t1", 5))[1].startswith("the attempt's lease was not renewed for")
    execution.renewed_at = clock.monotonic()
    execution.run.killed = Kill("cancel", "cancelled by a user")
    assert await worker.link.answer_fence("t1", 5) == (False, "the attempt is being stopped (cancel: cancelled by a user)")
