"""How the suite's test files are handed to its pytest-xdist processes: whole files (a file's module
fixtures start once), the files on the multi-host network as one unit (the network is built once), and the
longest units first.

Longest first, because a unit runs whole on one process: handed out in collection order, the Spark-heavy
files that came last ran on one process while the other had nothing left (78 s of a 17-minute run, on
2026-11-28). Each file's seconds are those of a recent run, kept in ``tests/durations.json``; a file not
in it counts as :data:`UNKNOWN_S`. The record only orders the files, so a stale one costs time, never a
test. ``SPARKYARD_RECORD_DURATIONS=PATH deploy/test.sh …`` writes a new one from a run (a file's setup,
call and teardown summed).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(__file__).resolve().parent / "durations.json"
# Test files that use the multi-host network (net_cluster): under xdist they all run on one process.
NET_FILES = ("tests/cluster/", "tests/faults/test_network_faults.py", "tests/faults/test_pipeline_faults.py")
NET_UNIT = "net"
# A file the record does not name yet: about a median Spark test file's time.
UNKNOWN_S = 20.0


def test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the multi-host network's files together."""
    path = test_file(nodeid)
    return NET_UNIT if path.startswith(NET_FILES) else path


def recorded(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test file of the recorded run; empty without a record."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {str(name): float(seconds) for name, seconds in data.items()}


def longest_first(nodeids: list[str], seconds: dict[str, float]) -> list[str]:
    """``nodeids`` with the units of most recorded seconds first; within a unit, and between units of the
    same seconds, in the order given."""
    per_unit: dict[str, float] = defaultdict(float)
    for path in {test_file(nodeid) for nodeid in nodeids}:
        per_unit[unit(path)] += seconds.get(path, UNKNOWN_S)
    return sorted(nodeids, key=lambda nodeid: -per_unit[unit(nodeid)])


def record(seconds: dict[str, float], path: Path) -> None:
    """Write ``seconds`` per test file into the record at ``path``, keeping the files this run did not run."""
    merged = recorded(path)
    merged.update({name: round(total, 1) for name, total in seconds.items()})
    path.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
