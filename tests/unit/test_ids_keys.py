"""Ids (job, run, task) and the Redis key schema, including the Lua key builders rendered into scripts."""

from __future__ import annotations

import re

import pytest

from sparkyard import ids
from sparkyard.ids import (
    MAX_TASK_INDEX,
    IdKind,
    ParsedId,
    new_job_id,
    parse_id,
    run_id,
    task_id,
)
from sparkyard.keys import DEFAULT_NAMESPACE, Keys

NOW_MS = 1732262400000  # 2024-11-22T08:00:00Z

# ----------------------------------------------------------------------------------------------------- ids


def test_new_job_id_is_j_then_creation_ms_in_hex_then_six_random_hex_digits() -> None:
    job = new_job_id(NOW_MS)
    assert re.fullmatch(r"j[0-9a-f]{21}", job)
    assert int(job[1:12], 16) == NOW_MS


def test_new_job_ids_of_the_same_millisecond_differ() -> None:
    assert len({new_job_id(NOW_MS) for _ in range(50)}) > 1


def test_new_job_ids_sort_by_creation_time_whatever_their_random_part(monkeypatch: pytest.MonkeyPatch) -> None:
    # The earlier id gets the largest random suffix, the later one the smallest: time still decides.
    suffixes = iter([b"\xff" * 5, b"\x00" * 5] * 5)
    monkeypatch.setattr(ids.secrets, "token_bytes", lambda n: next(suffixes))
    times = [2**40, 2**40 + 1, NOW_MS, NOW_MS + 1, NOW_MS + 999, NOW_MS + 1000, NOW_MS + 86_400_000,
             2**44 - 2, 2**44 - 1]
    made = [new_job_id(t) for t in times]
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_a_bulk_of_new_job_ids_shares_the_time_prefix_and_has_distinct_random_parts() -> None:
    made = ids.new_job_ids(NOW_MS, 1000)
    assert len(made) == 1000 and len(set(made)) == 1000
    assert all(re.fullmatch(r"j[0-9a-f]{21}", j) and int(j[1:12], 16) == NOW_MS for j in made)
    assert ids.new_job_ids(NOW_MS, 0) == []


def test_new_job_id_is_zero_padded_for_small_times() -> None:
    job = new_job_id(1)
    assert job.startswith("j00000000001")
    assert len(job) == 22


def test_run_id_is_job_dot_thirteen_digit_scheduled_ms() -> None:
    job = new_job_id(NOW_MS)
    assert run_id(job, NOW_MS) == f"{job}.1732262400000"
    assert run_id(job, 5) == f"{job}.0000000000005"


def test_run_id_is_deterministic_for_one_schedule_entry() -> None:
    job = new_job_id(NOW_MS)
    assert run_id(job, NOW_MS + 60_000) == run_id(job, NOW_MS + 60_000)


def test_run_ids_of_one_job_sort_by_scheduled_time() -> None:
    job = new_job_id(NOW_MS)
    times = [0, 9, 10, 999_999, NOW_MS, NOW_MS + 1]
    made = [run_id(job, t) for t in times]
    assert made == sorted(made)


def test_task_id_is_run_dot_five_digit_index() -> None:
    run = run_id(new_job_id(NOW_MS), NOW_MS)
    assert task_id(run, 0) == f"{run}.00000"
    assert task_id(run, 42) == f"{run}.00042"
    assert task_id(run, MAX_TASK_INDEX) == f"{run}.99999"


def test_task_ids_of_one_run_sort_in_index_order() -> None:
    run = run_id(new_job_id(NOW_MS), NOW_MS)
    made = [task_id(run, i) for i in (0, 1, 2, 9, 10, 11, 99, 100, 1000, MAX_TASK_INDEX)]
    assert made == sorted(made)


@pytest.mark.parametrize("index", [-1, MAX_TASK_INDEX + 1, 10**6])
def test_task_index_out_of_range_is_refused(index: int) -> None:
    run = run_id(new_job_id(NOW_MS), NOW_MS)
    with pytest.raises(ValueError, match=f"task index {index} out of range 0..{MAX_TASK_INDEX}"):
        task_id(run, index)


def test_max_task_index_fits_the_padding() -> None:
    assert MAX_TASK_INDEX == 99_999


def test_parse_id_reads_a_job_id() -> None:
    job = new_job_id(NOW_MS)
    assert parse_id(job) == ParsedId(IdKind.JOB, job)


def test_parse_id_reads_a_run_id_and_names_its_job() -> None:
    job = new_job_id(NOW_MS)
    run = run_id(job, NOW_MS)
    assert parse_id(run) == ParsedId(IdKind.RUN, job, run)


def test_parse_id_reads_a_task_id_and_names_its_run_and_job() -> None:
    job = new_job_id(NOW_MS)
    run = run_id(job, NOW_MS)
    task = task_id(run, 7)
    assert parse_id(task) == ParsedId(IdKind.TASK, job, run, task)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        "j",
        "j0193a4f5c3b2a1b2",  # 16 hex digits
        "j0193a4f5c3b2a1b2c3",  # 18 hex digits
        "J0193a4f5c3b2a1b2c",  # upper-case prefix
        "j0193A4F5C3B2A1B2C",  # upper-case hex
        "x0193a4f5c3b2a1b2c",
        "j0193a4f5c3b2a1b2g",  # not hex
        "j0193a4f5c3b2a1b2c.",
        "j0193a4f5c3b2a1b2c.123",  # run part too short
        "j0193a4f5c3b2a1b2c.17322624000001",  # run part too long
        "j0193a4f5c3b2a1b2c.1732262400000.1",  # task index not padded
        "j0193a4f5c3b2a1b2c.1732262400000.000001",
        "j0193a4f5c3b2a1b2c.1732262400000.00000.00000",
        " j0193a4f5c3b2a1b2c",
        "j0193a4f5c3b2a1b2c\n",
    ],
)
def test_parse_id_refuses_garbage_with_a_message_naming_the_text(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_id(text)
    assert repr(text) in str(err.value)
    assert "is not a job, run or task id" in str(err.value)


def test_examples_in_the_parse_id_error_message_are_themselves_valid_ids() -> None:
    with pytest.raises(ValueError) as err:
        parse_id("nope")
    examples = re.findall(r"j[0-9a-f.]+\d", str(err.value))
    assert [parse_id(e).kind for e in examples] == [IdKind.JOB, IdKind.RUN, IdKind.TASK]


# ---------------------------------------------------------------------------------------------------- keys

ID_KEYS = {
    # method → expected key with namespace 'P' and id 'X'
    "job": "P:job:X",
    "job_runs": "P:job:X:runs",
    "job_active": "P:job:X:active",
    "job_backfill": "P:job:X:backfill",
    "job_children": "P:job:X:children",
    "run": "P:run:X",
    "run_gate": "P:run:X:gate",
    "run_steps": "P:run:X:steps",
    "job_steps": "P:job:X:steps",
    "job_name": "P:name:X",
    "task": "P:task:X",
    "attempts": "P:task:X:attempts",
    "ready": "P:ready:X",
    "worker_leases": "P:worker:X:leases",
    "idempotency": "P:idem:X",
    "bundle": "P:bundle:X",
    "bundle_jobs": "P:bundle:X:jobs",
}
FIXED_KEYS = {
    "jobs": "P:jobs",
    "jobs_paused": "P:jobs:paused",
    "jobs_pipelines": "P:jobs:pipelines",
    "schedule": "P:schedule",
    "awaiting": "P:awaiting",
    "purge": "P:purge",
    "groups": "P:groups",
    "delayed": "P:delayed",
    "leases": "P:leases",
    "timeouts": "P:timeouts",
    "workers": "P:workers",
    "fence": "P:fence",
    "bundles": "P:bundles",
    "backfills": "P:backfills",
    "parents": "P:parents",
    "leader": "P:leader",
    "epoch": "P:epoch",
    "masters": "P:masters",
    "webhooks": "P:webhooks",
    "webhook_tries": "P:webhook_tries",
    "webhook_defaults": "P:webhook_defaults",
    "running_pipelines": "P:pipeline_runs:running",
}
# Lua builder name → Python method name (where they differ).
LUA_TO_PYTHON = {"idem": "idempotency"}


def test_default_namespace_is_sy() -> None:
    assert DEFAULT_NAMESPACE == "sy"
    assert Keys().namespace == "sy"
    assert Keys().jobs == "sy:jobs"


@pytest.mark.parametrize(("method", "expected"), sorted(ID_KEYS.items()))
def test_keyed_by_id_key_has_documented_layout(method: str, expected: str) -> None:
    assert getattr(Keys("P"), method)("X") == expected


@pytest.mark.parametrize(("name", "expected"), sorted(FIXED_KEYS.items()))
def test_singleton_key_has_documented_layout(name: str, expected: str) -> None:
    assert getattr(Keys("P"), name) == expected


@pytest.mark.parametrize("namespace", ["sy", "prod-eu.1", "A_b", "x" * 64])
def test_every_key_lives_under_the_namespace(namespace: str) -> None:
    keys = Keys(namespace)
    job = new_job_id(NOW_MS)
    built = [getattr(keys, m)(job) for m in ID_KEYS] + [getattr(keys, n) for n in FIXED_KEYS]
    assert all(k.startswith(f"{namespace}:") for k in built)
    assert len(set(built)) == len(built)


def test_keys_of_two_namespaces_never_collide() -> None:
    a, b = Keys("a"), Keys("b")
    assert a.task("t") != b.task("t")
    assert a.fence != b.fence


@pytest.mark.parametrize(
    "namespace", ["", "x" * 65, "has space", "quote'", 'dq"', "colon:", "slash/", "brace{", "ünï", "new\nline"]
)
def test_invalid_namespace_is_refused(namespace: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        Keys(namespace)


# ------------------------------------------------------------------------------------------------- Lua prelude

_LUA_BUILDER = re.compile(r"^K\.(\w+) = function\(id\) return '([^']*)' \.\. id \.\. '([^']*)' end$")
_LUA_CONSTANT = re.compile(r"^K\.(\w+) = '([^']*)'$")


def _eval_prelude(text: str) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """A tiny interpretation of the prelude: builders as (head, tail) around the id, constants as strings.

    Any line it does not understand fails the test, so the prelude cannot grow a form this misses."""
    builders: dict[str, tuple[str, str]] = {}
    constants: dict[str, str] = {}
    lines = text.splitlines()
    assert lines[0] == "local K = {}"
    for line in lines[1:]:
        if m := _LUA_BUILDER.match(line):
            builders[m.group(1)] = (m.group(2), m.group(3))
        elif m := _LUA_CONSTANT.match(line):
            constants[m.group(1)] = m.group(2)
        else:
            pytest.fail(f"unexpected line in the Lua prelude: {line!r}")
    return builders, constants


@pytest.mark.parametrize("namespace", ["sy", "prod-eu.1"])
@pytest.mark.parametrize("ident", ["j0193a4f5c3b2a1b2c", "j0193a4f5c3b2a1b2c.1732262400000.00003", "etl-group"])
def test_lua_key_builders_produce_the_python_keys(namespace: str, ident: str) -> None:
    keys = Keys(namespace)
    builders, _ = _eval_prelude(keys.lua_prelude())
    for lua_name, (head, tail) in builders.items():
        method = getattr(keys, LUA_TO_PYTHON.get(lua_name, lua_name))
        assert head + ident + tail == method(ident), lua_name


@pytest.mark.parametrize("namespace", ["sy", "prod-eu.1"])
def test_lua_key_constants_equal_the_python_keys(namespace: str) -> None:
    keys = Keys(namespace)
    _, constants = _eval_prelude(keys.lua_prelude())
    assert constants == {name: getattr(keys, name) for name in FIXED_KEYS}


def test_lua_prelude_covers_every_key_of_the_schema() -> None:
    builders, constants = _eval_prelude(Keys().lua_prelude())
    assert {LUA_TO_PYTHON.get(n, n) for n in builders} == set(ID_KEYS)
    assert set(constants) == set(FIXED_KEYS)
