"""Routing strategies of the slot scheduler: which worker gets which ready task."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from sparkyard.master.routing import Routable, Router, WorkerLoad

GROUP = "default"
STRATEGIES = [
    "",
    "ROUTING_UNSPECIFIED",
    "ROUTING_PREVIOUS_WORKER",
    "ROUTING_LEAST_LOADED",
    "ROUTING_ROUND_ROBIN",
    "ROUTING_RANDOM",
    "ROUTING_CONSISTENT_HASH",
]


def _tasks(count: int, routing: str = "", prefix: str = "t") -> list[Routable]:
    return [Routable(f"{prefix}{i:03d}", "", routing, f"key-{i}") for i in range(count)]


def _workers(*specs: tuple[str, int, int]) -> list[WorkerLoad]:
    return [WorkerLoad(worker_id, slots, leased) for worker_id, slots, leased in specs]


def _fresh(ids: list[str], slots: int = 1000) -> list[WorkerLoad]:
    return [WorkerLoad(w, slots, 0) for w in ids]


# ------------------------------------------------------------------------------------------- WorkerLoad


def test_worker_idle_slots_are_slots_minus_leased_never_negative() -> None:
    assert WorkerLoad("a", 4, 1).idle == 3
    assert WorkerLoad("a", 2, 5).idle == 0


def test_worker_without_slots_counts_as_fully_loaded() -> None:
    assert WorkerLoad("a", 0, 0).load == 1.0
    assert WorkerLoad("a", 4, 1).load == 0.25


# ------------------------------------------------------------------------------------- capacity and order


@pytest.mark.parametrize("routing", STRATEGIES)
def test_no_worker_gets_more_tasks_than_its_idle_slots(routing: str) -> None:
    workers = _workers(("a", 3, 1), ("b", 1, 0), ("c", 4, 4), ("d", 2, 3), ("e", 0, 0))
    idle_before = {w.worker_id: w.idle for w in workers}
    placed = Router(rng=random.Random(7)).assign(GROUP, _tasks(20, routing), workers)
    per_worker = Counter(worker for _, worker in placed)
    assert all(per_worker[w] <= idle_before[w] for w in idle_before)
    assert len(placed) == sum(idle_before.values()) == 3


@pytest.mark.parametrize("routing", STRATEGIES)
def test_assign_records_the_new_leases_on_the_workers(routing: str) -> None:
    workers = _workers(("a", 2, 0), ("b", 2, 1))
    placed = Router(rng=random.Random(1)).assign(GROUP, _tasks(2, routing), workers)
    assert sum(w.leased for w in workers) == 1 + len(placed) == 3


@pytest.mark.parametrize("routing", STRATEGIES)
def test_tasks_are_placed_in_the_given_order_and_the_later_ones_are_left(routing: str) -> None:
    tasks = _tasks(7, routing)
    placed = Router(rng=random.Random(3)).assign(GROUP, tasks, _workers(("a", 2, 0), ("b", 3, 1)))
    assert [task for task, _ in placed] == [t.task_id for t in tasks[:4]]


def test_each_task_is_placed_at_most_once() -> None:
    placed = Router().assign(GROUP, _tasks(10), _workers(("a", 5, 0), ("b", 5, 0)))
    assert len({task for task, _ in placed}) == len(placed) == 10


def test_nothing_is_placed_without_workers() -> None:
    assert Router().assign(GROUP, _tasks(3), []) == []


def test_nothing_is_placed_when_every_worker_is_full() -> None:
    assert Router().assign(GROUP, _tasks(3), _workers(("a", 2, 2), ("b", 1, 1))) == []


def test_nothing_is_placed_without_tasks() -> None:
    workers = _workers(("a", 2, 0))
    assert Router().assign(GROUP, [], workers) == []
    assert workers[0].leased == 0


def test_mixed_strategies_in_one_round_share_the_slots_in_queue_order() -> None:
    tasks = [
        Routable("t1", "b", ""),
        Routable("t2", "", "ROUTING_ROUND_ROBIN"),
        Routable("t3", "", "ROUTING_CONSISTENT_HASH", "k"),
        Routable("t4", "", "ROUTING_LEAST_LOADED"),
    ]
    placed = Router().assign(GROUP, tasks, _workers(("a", 1, 0), ("b", 1, 0), ("c", 1, 0)))
    assert [t for t, _ in placed] == ["t1", "t2", "t3"]
    assert dict(placed)["t1"] == "b"
    assert sorted(w for _, w in placed) == ["a", "b", "c"]


# ------------------------------------------------------------------------------------ default / previous


@pytest.mark.parametrize("routing", ["", "ROUTING_UNSPECIFIED", "ROUTING_PREVIOUS_WORKER"])
def test_default_routing_prefers_an_idle_previous_worker(routing: str) -> None:
    # b is the most loaded worker but ran this task index last time.
    workers = _workers(("a", 4, 0), ("b", 4, 3), ("c", 4, 1))
    placed = Router().assign(GROUP, [Routable("t", "b", routing)], workers)
    assert placed == [("t", "b")]


@pytest.mark.parametrize("routing", ["", "ROUTING_UNSPECIFIED", "ROUTING_PREVIOUS_WORKER"])
def test_default_routing_falls_back_to_least_loaded_when_the_previous_worker_is_busy(routing: str) -> None:
    workers = _workers(("a", 4, 2), ("b", 4, 4), ("c", 4, 1))
    assert Router().assign(GROUP, [Routable("t", "b", routing)], workers) == [("t", "c")]


@pytest.mark.parametrize("prev", ["", "gone"])
def test_default_routing_falls_back_to_least_loaded_when_the_previous_worker_is_absent(prev: str) -> None:
    workers = _workers(("a", 4, 2), ("c", 4, 1))
    assert Router().assign(GROUP, [Routable("t", prev)], workers) == [("t", "c")]


def test_default_routing_sends_tasks_back_to_their_previous_workers() -> None:
    tasks = [Routable("t0", "c"), Routable("t1", "a"), Routable("t2", "b"), Routable("t3", "a")]
    placed = Router().assign(GROUP, tasks, _workers(("a", 2, 0), ("b", 2, 0), ("c", 2, 0)))
    assert placed == [("t0", "c"), ("t1", "a"), ("t2", "b"), ("t3", "a")]


def test_default_routing_moves_on_once_the_previous_worker_fills_up() -> None:
    tasks = [Routable(f"t{i}", "a") for i in range(3)]
    placed = Router().assign(GROUP, tasks, _workers(("a", 2, 0), ("b", 2, 0)))
    assert placed == [("t0", "a"), ("t1", "a"), ("t2", "b")]


def test_unknown_routing_name_falls_back_to_least_loaded() -> None:
    workers = _workers(("a", 4, 3), ("b", 4, 0))
    assert Router().assign(GROUP, [Routable("t", "a", "ROUTING_FUTURE")], workers) == [("t", "b")]


# ------------------------------------------------------------------------------------------- least loaded


def test_least_loaded_picks_the_lowest_leased_to_slots_ratio() -> None:
    # a: 2/4 = 0.5, b: 1/2 = 0.5, c: 1/10 = 0.1 (most leased in absolute terms is not what counts)
    workers = _workers(("a", 4, 2), ("b", 2, 1), ("c", 10, 1))
    assert Router().assign(GROUP, [Routable("t", "", "ROUTING_LEAST_LOADED")], workers) == [("t", "c")]


def test_least_loaded_ignores_the_previous_worker() -> None:
    workers = _workers(("a", 4, 3), ("b", 4, 0))
    assert Router().assign(GROUP, [Routable("t", "a", "ROUTING_LEAST_LOADED")], workers) == [("t", "b")]


def test_least_loaded_breaks_a_ratio_tie_by_most_idle_slots() -> None:
    workers = _workers(("a", 2, 1), ("b", 8, 4))
    assert Router().assign(GROUP, [Routable("t", "", "ROUTING_LEAST_LOADED")], workers) == [("t", "b")]


def test_least_loaded_breaks_a_full_tie_by_worker_id() -> None:
    workers = _workers(("b", 2, 0), ("a", 2, 0))
    assert Router().assign(GROUP, [Routable("t", "", "ROUTING_LEAST_LOADED")], workers) == [("t", "a")]


def test_least_loaded_spreads_a_batch_evenly() -> None:
    placed = Router().assign(GROUP, _tasks(6, "ROUTING_LEAST_LOADED"),
                             _workers(("a", 4, 0), ("b", 4, 0), ("c", 4, 0)))
    assert Counter(w for _, w in placed) == {"a": 2, "b": 2, "c": 2}


def test_least_loaded_fills_by_ratio_not_by_count() -> None:
    # b has twice the slots of a, so it takes two tasks for each of a's.
    placed = Router().assign(GROUP, _tasks(6, "ROUTING_LEAST_LOADED"), _workers(("a", 4, 0), ("b", 8, 0)))
    assert Counter(w for _, w in placed) == {"a": 2, "b": 4}


def _scan_least_loaded(workers: list[WorkerLoad]) -> WorkerLoad | None:
    """The rule written as a scan of every worker: what the router's heap must agree with."""
    idle = [w for w in workers if w.idle]
    return min(idle, key=lambda w: (w.load, -w.idle, w.worker_id)) if idle else None


@pytest.mark.parametrize("seed", range(40))
def test_least_loaded_and_previous_worker_choices_match_a_scan_of_every_worker(seed: int) -> None:
    rng = random.Random(seed)
    ids = [f"w{i:02d}" for i in range(rng.randint(1, 30))]
    specs = [(w, rng.randint(0, 8), rng.randint(0, 10)) for w in ids]
    tasks = [Routable(f"t{i:03d}", rng.choice(ids + ["", "gone"]), rng.choice(["", "ROUTING_LEAST_LOADED"]))
             for i in range(rng.randint(1, 120))]
    expected: list[tuple[str, str]] = []
    reference = _workers(*specs)
    for task in tasks:
        prev = next((w for w in reference if w.worker_id == task.prev_worker), None)
        chosen = prev if task.routing == "" and prev is not None and prev.idle else _scan_least_loaded(reference)
        if chosen is None:
            break
        chosen.leased += 1
        expected.append((task.task_id, chosen.worker_id))
    assert Router().assign(GROUP, tasks, _workers(*specs)) == expected


# -------------------------------------------------------------------------------------------- round robin


def test_round_robin_cycles_through_workers_within_a_call() -> None:
    placed = Router().assign(GROUP, _tasks(5, "ROUTING_ROUND_ROBIN"), _fresh(["a", "b", "c"]))
    assert [w for _, w in placed] == ["a", "b", "c", "a", "b"]


def test_round_robin_continues_where_the_previous_call_stopped() -> None:
    router = Router()
    first = router.assign(GROUP, _tasks(2, "ROUTING_ROUND_ROBIN", "x"), _fresh(["a", "b", "c"]))
    second = router.assign(GROUP, _tasks(2, "ROUTING_ROUND_ROBIN", "y"), _fresh(["a", "b", "c"]))
    third = router.assign(GROUP, _tasks(2, "ROUTING_ROUND_ROBIN", "z"), _fresh(["a", "b", "c"]))
    assert [w for _, w in first + second + third] == ["a", "b", "c", "a", "b", "c"]


def test_round_robin_keeps_one_cursor_per_group() -> None:
    router = Router()
    router.assign("etl", _tasks(2, "ROUTING_ROUND_ROBIN"), _fresh(["a", "b", "c"]))
    other = router.assign("ml", _tasks(1, "ROUTING_ROUND_ROBIN"), _fresh(["a", "b", "c"]))
    again = router.assign("etl", _tasks(1, "ROUTING_ROUND_ROBIN"), _fresh(["a", "b", "c"]))
    assert [w for _, w in other] == ["a"]
    assert [w for _, w in again] == ["c"]


def test_round_robin_skips_a_full_worker() -> None:
    placed = Router().assign(GROUP, _tasks(4, "ROUTING_ROUND_ROBIN"),
                             _workers(("a", 9, 0), ("b", 1, 1), ("c", 9, 0)))
    assert [w for _, w in placed] == ["a", "c", "a", "c"]


def test_round_robin_continues_after_the_last_worker_even_when_it_left() -> None:
    router = Router()
    router.assign(GROUP, _tasks(2, "ROUTING_ROUND_ROBIN"), _fresh(["a", "b", "c"]))  # last: b
    placed = router.assign(GROUP, _tasks(2, "ROUTING_ROUND_ROBIN"), _fresh(["a", "c", "d"]))
    assert [w for _, w in placed] == ["c", "d"]


def test_round_robin_ignores_the_order_workers_are_listed_in() -> None:
    placed = Router().assign(GROUP, _tasks(3, "ROUTING_ROUND_ROBIN"), _fresh(["c", "a", "b"]))
    assert [w for _, w in placed] == ["a", "b", "c"]


# ------------------------------------------------------------------------------------------------- random


def test_random_only_picks_workers_with_an_idle_slot() -> None:
    router = Router(rng=random.Random(42))
    chosen: Counter[str] = Counter()
    for _ in range(50):
        workers = _workers(("a", 5, 0), ("b", 3, 3), ("c", 5, 0), ("d", 0, 0))
        chosen.update(w for _, w in router.assign(GROUP, _tasks(3, "ROUTING_RANDOM"), workers))
    assert set(chosen) == {"a", "c"}
    assert sum(chosen.values()) == 150


def test_random_uses_the_injected_source_so_a_seed_reproduces_the_choice() -> None:
    def run(seed: int) -> list[tuple[str, str]]:
        return Router(rng=random.Random(seed)).assign(GROUP, _tasks(20, "ROUTING_RANDOM"), _fresh(list("abcdef")))

    assert run(123) == run(123)
    assert len({w for _, w in run(123)}) > 1


def test_random_is_roughly_uniform_over_idle_workers() -> None:
    placed = Router(rng=random.Random(2024)).assign(GROUP, _tasks(900, "ROUTING_RANDOM"), _fresh(["a", "b", "c"]))
    counts = Counter(w for _, w in placed)
    assert all(200 <= counts[w] <= 400 for w in "abc")


# ---------------------------------------------------------------------------------------- consistent hash


def _owner(key: str, worker_ids: list[str], router: Router | None = None) -> str:
    """The worker that ``key`` is routed to when every worker has room."""
    placed = (router or Router()).assign(GROUP, [Routable("t", "", "ROUTING_CONSISTENT_HASH", key)],
                                         _fresh(worker_ids))
    assert len(placed) == 1
    return placed[0][1]


def _owners(keys: list[str], worker_ids: list[str]) -> dict[str, str]:
    """Where each key is routed when every worker has room for all of them (one ring, one call)."""
    tasks = [Routable(f"t{i}", "", "ROUTING_CONSISTENT_HASH", key) for i, key in enumerate(keys)]
    placed = Router().assign(GROUP, tasks, _fresh(worker_ids, slots=len(keys)))
    assert len(placed) == len(keys)
    return {key: worker for key, (_, worker) in zip(keys, placed)}


KEYS = [f"customer-{i}" for i in range(1000)]


def test_consistent_hash_keeps_a_key_on_the_same_worker_across_calls() -> None:
    router = Router()
    ids = ["w1", "w2", "w3", "w4"]
    first = {k: _owner(k, ids, router) for k in KEYS[:50]}
    again = {k: _owner(k, ids, router) for k in KEYS[:50]}
    assert first == again
    assert _owners(KEYS[:50], ids) == first  # one call with the whole batch agrees with one call per key


def test_consistent_hash_does_not_depend_on_the_router_instance_or_worker_order() -> None:
    ids = ["w1", "w2", "w3", "w4"]
    assert _owners(KEYS, ids) == _owners(KEYS, list(reversed(ids)))


def test_consistent_hash_spreads_keys_over_all_workers() -> None:
    counts = Counter(_owners(KEYS, ["w1", "w2", "w3", "w4"]).values())
    assert set(counts) == {"w1", "w2", "w3", "w4"}
    assert all(counts[w] >= 100 for w in counts)


def test_adding_a_worker_moves_only_a_minority_of_keys_and_only_to_the_new_worker() -> None:
    before = _owners(KEYS, ["w1", "w2", "w3", "w4"])
    after = _owners(KEYS, ["w1", "w2", "w3", "w4", "w5"])
    moved = [k for k in KEYS if before[k] != after[k]]
    assert 0 < len(moved) < 0.4 * len(KEYS)
    assert {after[k] for k in moved} == {"w5"}


def test_consistent_hash_sends_tasks_with_one_key_to_one_worker_in_a_batch() -> None:
    tasks = [Routable(f"t{i}", "", "ROUTING_CONSISTENT_HASH", "tenant-7") for i in range(4)]
    placed = Router().assign(GROUP, tasks, _fresh(["w1", "w2", "w3"]))
    assert len({w for _, w in placed}) == 1


@pytest.mark.parametrize("key", KEYS[:25])
def test_consistent_hash_spills_to_the_next_worker_on_the_ring_when_the_owner_is_full(key: str) -> None:
    ids = ["w1", "w2", "w3", "w4"]
    owner = _owner(key, ids)
    # The next worker clockwise is the one that owns the key once the owner is gone from the ring.
    successor = _owner(key, [w for w in ids if w != owner])
    workers = [WorkerLoad(w, 2, 2 if w == owner else 0) for w in ids]
    placed = Router().assign(GROUP, [Routable("t", "", "ROUTING_CONSISTENT_HASH", key)], workers)
    assert placed == [("t", successor)]


def test_consistent_hash_fills_the_owner_before_spilling() -> None:
    ids = ["w1", "w2", "w3"]
    owner = _owner("tenant-1", ids)
    successor = _owner("tenant-1", [w for w in ids if w != owner])
    tasks = [Routable(f"t{i}", "", "ROUTING_CONSISTENT_HASH", "tenant-1") for i in range(3)]
    placed = Router().assign(GROUP, tasks, [WorkerLoad(w, 2, 0) for w in ids])
    assert [w for _, w in placed] == [owner, owner, successor]
