"""A warm driver's Python workers start in the attempt's directory (worker/py_daemon.py), as spark-submit's
start in the program's; only in local mode, and never over the conf's own choice."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from sparkyard.worker import compat, jvm_temp, py_daemon


def test_each_worker_starts_in_the_directory_the_driver_named_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    named = tmp_path / "cwd"
    monkeypatch.setenv(py_daemon.CWD_FILE_ENV, str(named))
    seen: list[str] = []

    def spark_worker(sock: socket.socket, authenticated: bool) -> int:
        seen.append(os.getcwd())
        return 0

    worker = py_daemon.in_attempt_dir(spark_worker)
    first, second = tmp_path / "job-a", tmp_path / "job-b"
    first.mkdir()
    second.mkdir()
    with socket.socket() as sock:
        for attempt in (first, second):
            py_daemon.tell_workers(str(attempt))
            assert worker(sock, True) == 0
        named.write_text(str(tmp_path / "gone"))  # a directory removed since: where the daemon is
        worker(sock, True)
    assert seen == [str(first), str(second), str(second)]


@pytest.mark.parametrize("master, conf, given", [
    ("local[1]", {}, True), ("local", {}, True), ("spark://h:7077", {}, False), ("local-cluster[2,1,1024]", {}, False),
    ("local[2]", {compat.DAEMON_CONF: "pyspark.daemon"}, False), ("local[2]", {"spark.pyspark.python": "/py"}, False)])
def test_the_daemon_is_given_in_local_mode_unless_the_conf_chooses(
        master: str, conf: dict[str, str], given: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(py_daemon.CWD_FILE_ENV, "")  # so that what daemon_conf sets is undone after the test
    monkeypatch.delenv(py_daemon.CWD_FILE_ENV)
    out = py_daemon.daemon_conf(master, conf)
    assert out == ({compat.DAEMON_CONF: py_daemon.MODULE} if given else {})
    assert (py_daemon.CWD_FILE_ENV in os.environ) == given


def test_the_file_naming_the_directory_is_in_the_drivers_temporary_directory_which_the_worker_removes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver killed with -9 runs no exit handler: its file is gone with the directory the worker removes
    (before, one was left in /tmp per killed driver)."""
    monkeypatch.setenv(py_daemon.CWD_FILE_ENV, "")  # so that what daemon_conf sets is undone after the test
    monkeypatch.delenv(py_daemon.CWD_FILE_ENV)
    monkeypatch.setenv(jvm_temp.DIRECTORY_ENV, str(tmp_path))
    py_daemon.daemon_conf("local[1]", {})
    py_daemon.tell_workers("/attempt/dir")
    assert Path(os.environ[py_daemon.CWD_FILE_ENV]).parent == tmp_path
    assert py_daemon.attempt_cwd(os.environ[py_daemon.CWD_FILE_ENV]) == "/attempt/dir"


def test_a_directory_that_cannot_be_named_leaves_no_file_naming_the_previous_attempts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file lives on the worker's disk, which can fill: the Python workers then start where the daemon is,
    never in the previous attempt's directory."""
    named = tmp_path / "cwd"
    named.write_text("/previous/attempt")
    (tmp_path / "cwd.new").mkdir()  # the write fails
    monkeypatch.setenv(py_daemon.CWD_FILE_ENV, str(named))
    py_daemon.tell_workers("/this/attempt")
    assert not named.exists()
