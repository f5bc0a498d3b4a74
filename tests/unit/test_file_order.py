"""The suite's files go to its processes longest first, the multi-host files as one unit (tests/file_order.py)."""

from __future__ import annotations

from pathlib import Path

import file_order


def test_units_go_longest_first_keeping_their_tests_in_order_and_the_network_files_together() -> None:
    nodeids = ["tests/unit/test_a.py::one", "tests/unit/test_a.py::two", "tests/integration/test_b.py::one",
               "tests/cluster/test_c.py::one", "tests/integration/test_new.py::one",
               "tests/faults/test_network_faults.py::one"]
    seconds = {"tests/unit/test_a.py": 1.0, "tests/integration/test_b.py": 30.0, "tests/cluster/test_c.py": 10.0,
               "tests/faults/test_network_faults.py": 15.0}
    assert file_order.longest_first(nodeids, seconds) == [
        "tests/integration/test_b.py::one",
        "tests/cluster/test_c.py::one", "tests/faults/test_network_faults.py::one",  # the network: 25 s
        "tests/integration/test_new.py::one",  # not recorded: UNKNOWN_S
        "tests/unit/test_a.py::one", "tests/unit/test_a.py::two"]
    assert file_order.unit("tests/cluster/test_c.py::one") == file_order.unit("tests/faults/test_pipeline_faults.py::x")


def test_a_record_keeps_the_files_a_run_did_not_run(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    assert file_order.recorded(path) == {}
    file_order.record({"tests/unit/test_a.py": 1.04, "tests/unit/test_b.py": 2.0}, path)
    file_order.record({"tests/unit/test_b.py": 3.0}, path)
    assert file_order.recorded(path) == {"tests/unit/test_a.py": 1.0, "tests/unit/test_b.py": 3.0}
