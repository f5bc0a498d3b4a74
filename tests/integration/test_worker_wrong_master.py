"""A worker given a wrong --master (issue 25 item 5): it keeps trying every second or so (a master that
restarts must find it back at once), but says so in one WARNING line naming the address and the reason, not
one a second for ever and no raw gRPC error; every other try is a DEBUG line. Its readiness says it is not
registered, and its /metrics offers no ready slot."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

from harness import free_port, stop_process, wait_for


def _metric(url: str, name: str) -> float:
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5) as page:
        line = next(line for line in page.read().decode().splitlines() if line.startswith(f"{name} "))
    return float(line.split()[1])


def test_a_worker_with_a_wrong_master_says_so_once_while_it_retries(tmp_path: Path) -> None:
    wrong, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"  # nothing listens at wrong
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "sparkyard.worker.main", "--master", wrong, "--slots", "1",
                                   "--runner", "submit", "--work-dir", str(tmp_path / "w"), "--id", "wrong",
                                   "--metrics", metrics, "--log-level", "DEBUG"],
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: log.read_text().count(f"cannot reach master {wrong} (") >= 4, 60, "four tries")
        # Its runner is ready (a submit runner needs no warm-up), but no slot is offered unregistered.
        wait_for(lambda: "not ready: not registered with a master yet" in log.read_text(), 30, "readiness line")
        url = f"http://{metrics}/metrics"
        assert _metric(url, "sparkyard_worker_connected") == 0
        assert _metric(url, "sparkyard_worker_ready_slots") == 0
    finally:
        stop_process(worker)
    text = log.read_text()
    warnings = [line for line in text.splitlines() if " WARNING " in line and "reach master" in line]
    assert len(warnings) == 1, warnings  # the first try; the next is said a minute later
    assert f"cannot reach master {wrong} (UNAVAILABLE: " in warnings[0], warnings
    assert "not registered, retrying every" in warnings[0], warnings
    assert len([line for line in text.splitlines() if " DEBUG " in line and "reach master" in line]) >= 3
    assert "AioRpcError" not in text and "debug_error_string" not in text and "Traceback" not in text
    assert "readiness READY" not in text
