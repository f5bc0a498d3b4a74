"""The worker's view of its Spark cluster manager (worker/engine.py): which addresses a --spark-master names,
and when a run of failed probes makes the manager unreachable and an answer makes it reachable again."""

from __future__ import annotations

import asyncio

from sparkyard.worker.engine import DOWN_AFTER, Engine, manager_addresses, watched_master


def test_the_addresses_a_spark_master_names() -> None:
    assert manager_addresses("spark://10.0.0.5:7077") == [("10.0.0.5", 7077)]
    assert manager_addresses("spark://h1:7077,h2:7078") == [("h1", 7077), ("h2", 7078)]
    assert manager_addresses("k8s://https://api.example.com:6443") == [("api.example.com", 6443)]
    assert manager_addresses("k8s://https://api.example.com") == [("api.example.com", 443)]
    assert manager_addresses("local[2]") == manager_addresses("yarn") == manager_addresses("") == []


def test_the_engine_watched_is_the_default_runners() -> None:
    standalone = "spark://10.0.0.5:7077"
    assert watched_master("session", standalone, "") == watched_master("submit", standalone, "") == standalone
    assert watched_master("connect", standalone, "") == standalone  # its own server runs there
    assert watched_master("connect", standalone, "sc://spark:15002") == ""  # the given server's cluster is used


def test_unreachable_after_failed_probes_in_a_row_and_back_on_an_answer() -> None:
    changes: list[str] = []
    engine = Engine("spark://h:7077", changes.append)
    for _ in range(DOWN_AFTER - 1):
        engine.observed("refused")
    engine.observed("")  # an answer in between: the count starts again
    for _ in range(DOWN_AFTER - 1):
        engine.observed("refused")
    assert engine.problem == "" and changes == []
    engine.observed("refused")
    assert engine.problem == "Spark master spark://h:7077 unreachable (refused)"
    engine.observed("timed out")  # the same outage, another reason: no news
    assert changes == [engine.problem]
    engine.observed("")
    assert engine.problem == "" and changes[-1] == "" and len(changes) == 2


async def test_a_probe_answers_while_one_address_listens() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        engine = Engine(f"spark://127.0.0.1:1,127.0.0.1:{port}")
        assert await engine.probe() == ""
    assert await Engine(f"spark://127.0.0.1:{port}").probe() != ""
