"""``sparkyard local`` as a user starts it (issue 25 item 7): Ctrl-C or SIGTERM while it starts stops it at once
and stops what it started; a cluster that fails to start names a logs folder that exists; --http serves the
console."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from harness import free_port, wait_for, worker_jvm_env


def _ours(data_dir: Path) -> list[int]:
    """Pids of the processes started with this data dir (the master's and workers' command lines name it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(data_dir).encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _local(data_dir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "sparkyard.cli.main", "local", "--data-dir", str(data_dir),
                             "--listen", f"127.0.0.1:{free_port()}", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **worker_jvm_env()})


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_it_starts_stops_it_and_what_it_started(tmp_path: Path, sig: int) -> None:
    data_dir = tmp_path / "local"
    local = _local(data_dir, "--workers", "1")
    try:
        # The worker is spawned once the master listens; its session runner then takes seconds to warm.
        wait_for(lambda: (data_dir / "logs" / "worker-1.log").exists(), 60, "the worker to be started")
        assert local.poll() is None, local.communicate()
        local.send_signal(sig)
        _, err = local.communicate(timeout=90)  # not the 120 s start timeout
        assert local.returncode == 128 + sig, err
        assert err.strip().splitlines()[-1] == "sparkyard local: stopped while starting; stopping what was started"
        assert _ours(data_dir) == []
    finally:
        if local.poll() is None:
            local.kill()
            local.wait()
        for pid in _ours(data_dir):
            os.kill(pid, signal.SIGKILL)


def test_a_failed_start_names_a_logs_folder_that_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # slots 0: the worker refuses its configuration and exits at once.
    done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "local", "--data-dir", "rel/dir",
                           "--listen", f"127.0.0.1:{free_port()}", "--workers", "1", "--slots", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    logs = Path(line.rsplit("see ", 1)[1])
    assert logs.is_absolute() and (logs / "worker-1.log").exists(), line


def test_a_taken_http_address_is_one_line_naming_it_exit_2_and_nothing_left(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    http = "127.0.0.1:%d" % taken.getsockname()[1]
    try:
        local = _local(tmp_path / "local", "--workers", "1", "--http", http)
        _, err = local.communicate(timeout=120)
    finally:
        taken.close()
    assert local.returncode == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith("sparkyard local: the master did not start (exit 2): ") and f"http on {http}" in line, line
    assert line.endswith(f"see {tmp_path / 'local' / 'logs' / 'master.log'}"), line
    assert _ours(tmp_path / "local") == []


def test_http_serves_the_console(tmp_path: Path) -> None:
    http = f"127.0.0.1:{free_port()}"
    local = _local(tmp_path / "local", "--workers", "1", "--runner", "submit", "--http", http)
    try:
        assert local.stdout is not None
        ready = local.stdout.readline()
        assert f"console http://{http}/" in ready, ready
        with urllib.request.urlopen(f"http://{http}/", timeout=10) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
    finally:
        local.send_signal(signal.SIGTERM)
        local.communicate(timeout=90)
    assert _ours(tmp_path / "local") == []
