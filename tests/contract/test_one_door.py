"""One door to shared state, every write fenced: the guard a new unfenced write fails.

Every ``.lua`` file is a script of the library or one of its Lua libraries; every script that writes (itself
or through a function of ``lib.lua`` or ``lib_pipelines.lua``) runs the leader-epoch fence, unless
``UNFENCED_WRITES`` names it with its reason; the read-only scripts write nothing; a script is rendered with
the pipeline functions exactly when its calls can reach them. On the Python side only the store's modules
may hold a Redis client, and none of them sends a write command itself, except what ``DIRECT_COMMANDS``
lists with its reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sparkyard.keys import Keys
from sparkyard.master.scripts import (FENCE, LIBRARIES, PIPELINE_SCRIPTS, READ_ONLY, SCRIPT_NAMES, UNFENCED,
                                     UNFENCED_WRITES, render)

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "common" / "scripts"
MASTER = ROOT / "master"

LUA_WRITES = frozenset("""
    SET SETEX PSETEX SETNX GETSET GETDEL GETEX DEL UNLINK EXPIRE PEXPIRE EXPIREAT PEXPIREAT PERSIST RENAME
    RENAMENX COPY RESTORE MOVE INCR INCRBY INCRBYFLOAT DECR DECRBY APPEND SETRANGE MSET MSETNX HSET HSETNX HMSET
    HDEL HINCRBY HINCRBYFLOAT SADD SREM SPOP SMOVE SINTERSTORE SUNIONSTORE SDIFFSTORE ZADD ZREM ZINCRBY ZPOPMIN
    ZPOPMAX ZREMRANGEBYSCORE ZREMRANGEBYRANK ZREMRANGEBYLEX ZUNIONSTORE ZINTERSTORE ZDIFFSTORE ZRANGESTORE
    LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LREM LSET LTRIM LINSERT LMOVE RPOPLPUSH XADD XDEL XTRIM PFADD GEOADD
    BITOP SETBIT FLUSHDB FLUSHALL
""".split())
# redis-py's names for the same commands, and the generic ones that can send any command.
PY_WRITES = frozenset(c.lower() for c in LUA_WRITES) | {"delete", "execute_command", "eval", "evalsha", "fcall"}
# Modules of master/ that may hold a Redis client: the store's doors and the composition root that makes
# the clients (redis.exceptions, which only names errors, may be imported anywhere).
DOORS = {
    "redis_store.py": "the Store: every write a script of the library",
    "redis_reads.py": "the Store's plain reads (RedisStore extends it): pipelines of reads, no write",
    "redis_bundles.py": "the store's door to bundles (chunks are bytes: a client of its own)",
    "scripts.py": "the script library: registers and calls the scripts",
    "redis_url.py": "makes the clients from --redis-url",
    "server.py": "composition root: makes the clients and waits for Redis with PING",
    "embedded_redis.py": "starts the master's own redis-server and waits for it with PING",
}
# Redis commands a door sends itself, and why each needs no fence.
DIRECT_COMMANDS = {
    ("scripts.py", "execute_command"): "WAIT after a write (--redis-min-replicas, ScriptLibrary.execute): it "
                                       "writes nothing",
}
# Commands whose names Python objects share (list.append, Path.unlink, Event.set…): counted only on a
# receiver that names a Redis client or pipeline.
AMBIGUOUS = frozenset({"append", "set", "unlink", "delete", "copy", "rename", "move", "restore", "persist"})
CLIENT = re.compile(r"redis|pipe|client|blobs", re.I)
LUA_CALL = re.compile(r"redis\.p?call\(\s*(['\"]?)(\w*)")
# Where a function of a Lua library begins: `local function f(`, or `f = function(` for one declared earlier.
LUA_FUNCTION = re.compile(r"^(?:local function (\w+)\(|(\w+) = function\()", re.M)


def _writes(body: str) -> set[str]:
    """Commands of ``redis.call`` in Lua text that write ('?' for a command not named by a literal)."""
    found = set()
    for quote, command in LUA_CALL.findall(body):
        if not quote:
            found.add("?")
        elif command.upper() in LUA_WRITES:
            found.add(command.upper())
    return found


def _functions(*libraries: str) -> dict[str, str]:
    """The functions the Lua ``libraries`` define, by name: each one's text (comments left out) up to the next."""
    text = re.sub(r"--[^\n]*", "", "\n".join((SCRIPTS / f"{lib}.lua").read_text() for lib in libraries))
    starts = list(LUA_FUNCTION.finditer(text))
    return {m.group(1) or m.group(2): text[m.start():n.start() if n else len(text)]
            for m, n in zip(starts, [*starts[1:], None])}


def _calls(body: str, names: set[str]) -> set[str]:
    return {name for name in names if re.search(rf"\b{name}\(", body)}


def _calling(functions: dict[str, str], targets: set[str]) -> set[str]:
    """``targets`` and the ``functions`` that call one of them, themselves or through another."""
    found = set(targets)
    while more := {name for name, body in functions.items() if name not in found and _calls(body, found)}:
        found |= more
    return found


def _lib_writers() -> set[str]:
    """The functions of the Lua libraries that write, themselves or through another of them."""
    functions = _functions(*LIBRARIES)
    return _calling(functions, {name for name, body in functions.items() if _writes(body)})


def _script_writes(name: str, writers: set[str]) -> set[str]:
    body = (SCRIPTS / f"{name}.lua").read_text()
    return _writes(body) | {f"{w}()" for w in _calls(body, writers)}


def test_every_lua_file_is_a_script_of_the_library_or_a_library() -> None:
    files = {p.stem for p in SCRIPTS.glob("*.lua")} - set(LIBRARIES)
    assert files == set(SCRIPT_NAMES)
    assert set(LIBRARIES) <= {p.stem for p in SCRIPTS.glob("*.lua")}
    assert UNFENCED == READ_ONLY | set(UNFENCED_WRITES) and not READ_ONLY & set(UNFENCED_WRITES)


def test_every_script_that_writes_runs_the_fence_unless_the_allow_list_says_why_not() -> None:
    writers = _lib_writers()
    assert {"create_run", "finish_attempt"} <= writers  # the analysis sees writes through lib.lua
    unfenced_writers = []
    for name in SCRIPT_NAMES:
        writes = _script_writes(name, writers)
        if name in READ_ONLY:
            assert not writes, f"{name}.lua is listed as read-only but writes: {sorted(writes)}"
        fenced = FENCE in render(name, Keys())
        assert fenced == (name not in UNFENCED), name
        if writes and not fenced:
            unfenced_writers.append(name)
    assert sorted(unfenced_writers) == sorted(UNFENCED_WRITES)
    assert all(len(reason) > 20 for reason in UNFENCED_WRITES.values())


def test_a_script_gets_the_pipeline_functions_exactly_when_its_calls_reach_them() -> None:
    """lib.lua's settle_run and create_run call step_ended and create_pipeline_run, which lib_pipelines.lua
    defines: a script rendered without it that came to end or make a pipeline step's run would fail there (a
    call of nil), and only once a pipeline ran."""
    pipeline = set(_functions("lib_pipelines"))
    reaching = _calling(_functions(*LIBRARIES), pipeline)
    assert {"step_ended", "create_pipeline_run", "pipeline_end"} <= pipeline
    assert {"settle_run", "create_run", "task_terminal", "fail_attempt"} <= reaching  # calls through lib.lua
    needing = {name for name in SCRIPT_NAMES if _calls((SCRIPTS / f"{name}.lua").read_text(), reaching)}
    assert needing == PIPELINE_SCRIPTS, f"scripts that reach the pipeline functions: {sorted(needing)}"
    functions = (SCRIPTS / "lib_pipelines.lua").read_text()
    for name in SCRIPT_NAMES:
        assert (functions in render(name, Keys())) == (name in PIPELINE_SCRIPTS), name


def _redis_imports(tree: ast.Module) -> list[str]:
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    return [m for m in names if m.split(".")[0] == "redis" and m != "redis.exceptions"]


def test_only_the_store_holds_a_redis_client_and_it_writes_only_through_scripts() -> None:
    doors, direct = set(), set()
    for path in sorted(MASTER.glob("*.py")):
        tree = ast.parse(path.read_text())
        if _redis_imports(tree):
            doors.add(path.name)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in PY_WRITES and path.name in DOORS
                    and (node.func.attr not in AMBIGUOUS or CLIENT.search(ast.unparse(node.func.value)))):
                direct.add((path.name, node.func.attr))
    assert doors <= set(DOORS), f"modules holding a Redis client outside the store: {sorted(doors - set(DOORS))}"
    assert direct == set(DIRECT_COMMANDS), f"Redis commands sent outside a script: {sorted(direct)}"


def test_the_guard_sees_a_write_in_lua_and_in_python() -> None:
    assert _writes("redis.call('HSET', K.masters, id, v)") == {"HSET"}
    assert _writes("redis.pcall(cmd, key)") == {"?"}
    assert _writes("redis.call('HGET', K.job(id), 'state')") == set()
    tree = ast.parse("from redis.asyncio import Redis\n")
    assert _redis_imports(tree) == ["redis.asyncio"]
