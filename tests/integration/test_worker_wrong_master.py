"""A worker given a wrong --master (issue 25 item 5): one line per retry naming the address and the reason, no
raw gRPC error, and its readiness says it is not registered."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness import free_port, stop_process, wait_for


def test_a_worker_with_a_wrong_master_logs_one_line_per_retry(tmp_path: Path) -> None:
    wrong = f"127.0.0.1:{free_port()}"  # nothing listens there
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "sparkyard.worker.main", "--master", wrong, "--slots", "1",
                                   "--runner", "submit", "--work-dir", str(tmp_path / "w"), "--id", "wrong"],
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: log.read_text().count("cannot reach master") >= 2, 60, "two retries")
    finally:
        stop_process(worker)
    text = log.read_text()
    retries = [line for line in text.splitlines() if "cannot reach master" in line]
    assert all(f"cannot reach master {wrong} (UNAVAILABLE: " in line and "not registered, retrying in" in line
               for line in retries), retries
    assert "AioRpcError" not in text and "debug_error_string" not in text and "Traceback" not in text
    assert "readiness READY" not in text and "not ready: not registered with a master yet" in text
