"""The fault suite's checker (tests/cluster/ledger.py) compares no wall clock across hosts: two executions of a
task overlap when the later one's start line was appended before the earlier one's last line, whatever the
``at`` times their hosts wrote (the soak skews a worker's clock by ±30 s)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from ledger import audit, read


def line(event: str, token: int, at: float) -> str:
    return json.dumps({"event": event, "job": "j", "run": "r", "task": "t", "token": token, "worker": f"w{token}",
                       "scheduled_ms": 0, "at": at})


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(f"{x}\n" for x in lines))
    return path


def overlaps(path: Path) -> list[str]:
    found = audit(path, cast(Any, None), [])  # no job of the scheduler to compare: the ledger's own checks
    return [v for v in found.violations if "ran twice at once" in v]


def test_an_execution_on_a_host_30_s_behind_that_starts_while_another_beats_overlaps(tmp_path: Path) -> None:
    # By wall time token 2 ran (75.2–76.0) long before token 1 began (100.0): by the file it started while
    # token 1 still beat.
    ledger = write(tmp_path / "ledger.jsonl", line("start", 1, 100.0), line("beat", 1, 100.1),
                   line("start", 2, 75.2), line("beat", 1, 100.3), line("end", 2, 76.0))
    assert [(e.token, e.first_line, e.last_line) for e in read(ledger)] == [(1, 0, 3), (2, 2, 4)]
    assert overlaps(ledger) == ["task t ran twice at once: token 2 on w2 started (ledger line 2) before token 1 "
                                "on w1 wrote its last line (3)"]


def test_a_rerun_on_a_host_30_s_ahead_after_the_first_stopped_does_not(tmp_path: Path) -> None:
    # By wall time token 2 (on a host 30 s behind) started 24 s before token 1's last beat: by the file, after.
    ledger = write(tmp_path / "ledger.jsonl", line("start", 1, 100.0), line("beat", 1, 100.1),
                   line("start", 2, 76.0), line("end", 2, 77.0))
    assert overlaps(ledger) == []

