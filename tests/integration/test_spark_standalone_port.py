"""deploy/spark-standalone.sh --port (issue 25 item 5): a cluster stopped and started again with a fixed port
keeps its spark:// URL, so Sparkyard workers' --spark-master stays right; a bad port is refused in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness import ROOT, free_port

SCRIPT = ROOT / "deploy" / "spark-standalone.sh"


def _run(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), "--data-dir", str(data), *args], capture_output=True, text=True,
                          timeout=180)


def test_a_fixed_port_keeps_the_master_url_across_a_restart(tmp_path: Path) -> None:
    port = free_port()
    urls = []
    try:
        for _ in range(2):
            started = _run(tmp_path, "--workers", "0", "--port", str(port), "start")
            assert started.returncode == 0, started.stderr
            urls.append((tmp_path / "run" / "master.url").read_text().strip())
            assert _run(tmp_path, "stop").returncode == 0
    finally:
        _run(tmp_path, "stop")
    assert urls == [f"spark://127.0.0.1:{port}"] * 2


def test_a_bad_port_is_refused_in_one_line(tmp_path: Path) -> None:
    done = _run(tmp_path, "--port", "70000", "start")
    assert done.returncode == 2
    assert done.stderr.strip() == "spark-standalone: --port '70000' is not a port number (0-65535)"
