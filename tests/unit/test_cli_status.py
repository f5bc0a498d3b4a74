"""`sparkyard status` without --json: lines a person reads, not a Python dict (found by a new user's walk)."""

from __future__ import annotations

from rich.console import Console

from sparkyard.cli.render import status_view
from sparkyard.v1 import sparkyard_pb2 as pb


def test_status_reads_as_lines_and_a_table_of_masters() -> None:
    status = pb.StatusResponse(version="0.9", master_id="m1", workers_alive=2, slots_total=4, slots_free=1,
                               ready_by_group={"": 3, "gpu": 2}, leased=3, timers_pending=7, jobs_scheduled=5,
                               redis="redis://127.0.0.1:6379/0", role="leader", leader="127.0.0.1:7070", epoch=4,
                               masters=[pb.MasterInfo(id="m1", address="127.0.0.1:7070", role="leader"),
                                        pb.MasterInfo(id="m2", address="127.0.0.1:7071", role="standby")])
    status.started_at.FromMilliseconds(1_795_000_000_000)
    console = Console(width=160, record=True)
    status_view(console, status)
    text = console.export_text()
    assert "{" not in text and "'" not in text
    assert "master m1 (leader, epoch 4), Sparkyard 0.9" in text and "leader: 127.0.0.1:7070" in text
    assert "workers alive 2, slots 1 free of 4; tasks ready 5 (default 3, gpu 2), leased 3" in text
    assert "m2" in text and "standby" in text and "127.0.0.1:7071" in text
