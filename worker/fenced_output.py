"""Fenced output: a task writes into a staging directory and publishes it to its final path only while its
attempt's fencing token is still the newest, so a zombie attempt (paused, cut off, then woken after its
task was re-run) can never replace the re-run's output.

Layout beside a final path ``/data/out/daily`` (all on one filesystem, so every rename is atomic)::

    /data/out/daily                          symlink → .daily.sparkyard/v<token>-<nonce>   (what readers read)
    /data/out/.daily.sparkyard/lock          flock'ed by whoever stages or publishes
    /data/out/.daily.sparkyard/record.json   {"token", "fence", "task_id", "attempt", "version"}
    /data/out/.daily.sparkyard/staging/t<token>-<nonce>/   an attempt writes here (Spark creates it)
    /data/out/.daily.sparkyard/v<token>-<nonce>/           published versions (the current and the one before)

Under the lock, :meth:`FencedOutput.stage` raises the record's ``fence`` to the attempt's token (so once a
re-run has begun writing, an older attempt can no longer publish), and :meth:`FencedOutput.publish`
compares and sets: it refuses when the recorded ``token`` or ``fence`` is higher than the attempt's, else
renames the staging directory to a version and swaps the symlink with ``os.replace`` (POSIX rename will
not replace a non-empty directory; it replaces a symlink atomically). Readers open the final path and see
one whole version, never a mix. Fencing tokens come from one Redis counter for the whole cluster, so
among all attempts that write one path, the one that started last wins.

Holds on local filesystems and POSIX shared filesystems whose rename is atomic and whose locks work across
hosts (NFSv4, or NFSv3 with lockd: Linux maps ``flock`` to POSIX locks there; a ``nolock`` mount does not
lock across hosts). Object stores (S3, GCS, ABFS) have no atomic rename or lock: out of scope.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

META_SUFFIX = ".sparkyard"
# How long a stage or publish waits for the lock (another committer holds it) before giving up.
LOCK_WAIT_S = 60.0
LOCK_POLL_S = 0.05


class OutputError(Exception):
    """Bad use of fenced output (a bad path, commit before output, commit twice), named in the message."""


class StaleOutput(OutputError):
    """The attempt is fenced: a newer attempt has staged or published this output, or the master says the
    attempt's token is no longer current. Nothing was published."""


@dataclass(frozen=True)
class Record:
    """Who last published a final path (``token`` 0: nobody yet) and the newest token that staged it."""

    token: int = 0
    fence: int = 0
    task_id: str = ""
    attempt: int = 0
    version: str = ""


def final_path(path: object) -> Path:
    """The absolute final path named by ``path`` (relative paths resolve in the working directory), or
    OutputError saying what is wrong with it."""
    if not isinstance(path, (str, os.PathLike)):
        raise OutputError(f"ctx.output() takes a filesystem path, not {type(path).__name__}")
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise OutputError("ctx.output() needs a non-empty path")
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif "://" in text:
        raise OutputError(f"ctx.output({text!r}): only local and POSIX shared filesystem paths are supported; "
                          "object stores and other URLs have no atomic rename")
    final = Path(os.path.abspath(text))
    if final.parent == final:
        raise OutputError(f"ctx.output({text!r}): the final path cannot be the filesystem root")
    if final.name.endswith(META_SUFFIX):
        raise OutputError(f"ctx.output({text!r}): names ending in {META_SUFFIX} are Sparkyard's own")
    return final


class FencedOutput:
    """The fenced publication of one final path."""

    def __init__(self, final: Path) -> None:
        self.final = final
        self.meta = final.parent / f".{final.name}{META_SUFFIX}"

    def stage(self, token: int) -> Path:
        """A staging path for the attempt with ``token`` (not created: Spark's writer creates it), after
        raising the fence to ``token``; StaleOutput if a newer attempt got there first."""
        try:
            (self.meta / "staging").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot create the staging area {self.meta}: {exc.strerror or exc}") from None
        self._check_final_is_ours()
        with self._locked():
            record = self.record()
            self._refuse_if_newer(record, token, "staged")
            if token > record.fence:
                self._write_record(Record(record.token, token, record.task_id, record.attempt, record.version))
        return self.meta / "staging" / f"t{token}-{secrets.token_hex(4)}"

    def check(self, token: int) -> None:
        """StaleOutput if a newer attempt has staged or published this path (a look, without publishing)."""
        with self._locked():
            self._refuse_if_newer(self.record(), token, "published")

    def publish(self, staging: Path, token: int, task_id: str, attempt: int) -> None:
        """Make ``staging`` the content of the final path if no newer attempt has staged or published it.
        Re-publishing with the same token is allowed (the attempt's newer staging replaces its older one)."""
        with self._locked():
            record = self.record()
            self._refuse_if_newer(record, token, "published")
            if not staging.is_dir():
                raise OutputError(f"nothing was written to the staging directory {staging} of {self.final}: "
                                  "write into the path ctx.output() returned before ctx.commit()")
            self._check_final_is_ours()
            version = f"v{token}-{secrets.token_hex(4)}"
            os.rename(staging, self.meta / version)
            # The record first: the link never names a version newer than the record says was published.
            self._write_record(Record(token, max(token, record.fence), task_id, attempt, version))
            link = self.meta / f"link-{secrets.token_hex(4)}"
            os.symlink(f"{self.meta.name}/{version}", link)
            os.replace(link, self.final)
            self._sweep(keep={version, record.version}, token=token)

    def record(self) -> Record:
        """The last publication and fence (readers may call it to see which attempt's output they read)."""
        path = self.meta / "record.json"
        try:
            data = json.loads(path.read_text())
            return Record(int(data["token"]), int(data["fence"]), str(data["task_id"]), int(data["attempt"]),
                          str(data["version"]))
        except FileNotFoundError:
            return Record()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise OutputError(f"the fencing record {path} cannot be read ({type(exc).__name__}: {exc}); "
                              "it is written only by ctx.commit()") from None

    def _refuse_if_newer(self, record: Record, token: int, what: str) -> None:
        if record.token > token:
            raise StaleOutput(f"{self.final}: not {what}: fencing token {token} is stale; attempt "
                              f"{record.attempt} of task {record.task_id} (token {record.token}) has published it")
        if record.fence > token:
            raise StaleOutput(f"{self.final}: not {what}: fencing token {token} is stale; a newer attempt "
                              f"(token {record.fence}) is writing it")

    def _check_final_is_ours(self) -> None:
        if os.path.lexists(self.final):
            target = os.readlink(self.final) if self.final.is_symlink() else ""
            if not target.startswith(f"{self.meta.name}/"):
                raise OutputError(f"{self.final} exists and was not published by ctx.commit(): move it away "
                                  "or write to another path")

    def _write_record(self, record: Record) -> None:
        tmp = self.meta / f"record-{secrets.token_hex(4)}.tmp"
        with open(tmp, "w") as f:
            json.dump(record.__dict__, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.meta / "record.json")

    def _sweep(self, keep: set[str], token: int) -> None:
        """Remove versions older than the one just replaced, and the staging of attempts that can no longer
        publish (a token below the published one)."""
        for entry in self.meta.iterdir():
            if entry.name.startswith("v") and entry.is_dir() and entry.name not in keep:
                shutil.rmtree(entry, ignore_errors=True)
        for entry in (self.meta / "staging").iterdir():
            staged = entry.name[1:].split("-", 1)[0]
            if staged.isdigit() and int(staged) < token:
                shutil.rmtree(entry, ignore_errors=True)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        path = self.meta / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise OutputError(f"cannot lock {path}: {exc.strerror} (does this filesystem support "
                                          "locks?)") from None
                    if time.monotonic() > deadline:
                        raise OutputError(f"{path} stayed locked for {LOCK_WAIT_S:g}s: another attempt holds "
                                          "it (a paused process?)") from None
                    time.sleep(LOCK_POLL_S)
            yield
        finally:
            os.close(fd)


class AttemptOutputs:
    """The fenced outputs of one attempt: ``ctx.output(path)`` stages, ``ctx.commit()`` publishes them all
    once the worker confirms the attempt still holds its token."""

    def __init__(self) -> None:
        self._staged: dict[Path, Path] = {}  # final path → staging path
        self._committed = False

    def output(self, path: object, token: int) -> str:
        if self._committed:
            raise OutputError("ctx.output() after ctx.commit(): an attempt commits its outputs once")
        final = final_path(path)
        if final not in self._staged:
            for other in self._staged:
                if final.is_relative_to(other) or other.is_relative_to(final):
                    raise OutputError(f"ctx.output({str(final)!r}) overlaps the output {str(other)!r} of this attempt")
            self._staged[final] = FencedOutput(final).stage(token)
        return str(self._staged[final])

    def commit(self, token: int, task_id: str, attempt: int, confirm: Callable[[], tuple[bool, str]]) -> list[str]:
        """Publish every staged output (in the order staged); the final paths. ``confirm`` asks the worker
        whether the token is current, between a look at the fencing records (a clear refusal when a newer
        attempt got there first, with no round trip) and the publication, which checks them again."""
        if not self._staged:
            raise OutputError("ctx.commit() without ctx.output(): call ctx.output(path) first and write there")
        if self._committed:
            raise OutputError("ctx.commit() was already called for this attempt")
        for final in self._staged:
            FencedOutput(final).check(token)
        current, reason = confirm()
        if not current:
            raise StaleOutput(f"{', '.join(map(str, self._staged))}: not published: fencing token {token} is not "
                              f"current ({reason})")
        self._committed = True
        for final, staging in self._staged.items():
            FencedOutput(final).publish(staging, token, task_id, attempt)
        return [str(final) for final in self._staged]
