"""Loading of the Lua scripts under ``common/scripts/`` (package data ``sparkyard/scripts``).

A script as sent to Redis is five parts, in this order:

1. a prelude generated from Python — ``K`` (key builders from :class:`sparkyard.keys.Keys`),
   ``task_id`` (from :mod:`sparkyard.ids`) and ``EDGES`` (transition tables from :mod:`sparkyard.states`),
   so none is ever written twice;
2. the clock: production scripts read Redis ``TIME``; only a library built with a test clock renders scripts
   that take the time from the caller's clock, as one more, last ARGV (see :data:`INJECTED_TIME`);
3. ``lib.lua``, the functions the scripts share, and after it, for the scripts that can make or end a run
   (``PIPELINE_SCRIPTS``), ``lib_pipelines.lua``, the pipeline functions lib.lua's calls reach there;
4. for every script that writes: the fence — the caller's leader epoch travels as one more, last ARGV
   (added here, removed before the body sees ARGV), and the script refuses with ``FENCED`` unless it is
   the current epoch, so a master that lost the leadership (paused, partitioned) can change nothing. The
   only writes without it are listed, with their reasons, in ``UNFENCED_WRITES``;
5. the script's own body, whose header documents KEYS, ARGV and the invariant it keeps.

Each script is registered once and then called by SHA (``EVALSHA``); redis-py re-sends the source on
``NOSCRIPT`` after a Redis restart.
"""

from __future__ import annotations

import logging
import sys
import time
from importlib import resources
from typing import Any, Callable

import redis.exceptions
from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ResponseError

from sparkyard import ids
from sparkyard.clock import Clock
from sparkyard.errors import Unavailable
from sparkyard.keys import Keys
from sparkyard.states import lua_tables

SCRIPT_NAMES = (
    "submit", "fire", "peek", "claim", "renew", "report", "release", "reap", "cancel", "job_state",
    "reschedule", "update", "bundle_gc", "bundle_upload", "bundle_hold", "leader", "master", "worker", "delete_job",
    "retention", "backfill", "queue_depth", "webhook", "tasks",
)
# How long a write waits for --redis-min-replicas replicas to have it before it is refused (ScriptLibrary.execute).
REPLICA_WAIT_MS = 1_000
# Scripts that only read: not fenced (tests/contract/test_one_door.py checks they write nothing).
READ_ONLY = frozenset({"peek", "queue_depth", "tasks"})
# The only writes not fenced, and why: the allow-list tests/contract/test_one_door.py holds every write to.
UNFENCED_WRITES: dict[str, str] = {
    "leader": "the election itself: it is what makes an epoch, so nothing can fence it",
    "master": "a master's own entry in the list of masters: a standby must record itself too, and the "
              "entry only informs (status), no decision reads it",
}
UNFENCED = READ_ONLY | frozenset(UNFENCED_WRITES)
# The Lua libraries, rendered before a script's body in this order: lib.lua into every script, and
# lib_pipelines.lua (the pipeline functions: docs/pipelines.md) into the scripts that can make or end a run,
# which reach it through lib.lua's create_run or settle_run or call its pipeline_end. The others go without:
# less for Redis to compile and keep, and a script reads with only what it can run. A script that comes to
# reach the pipeline functions must be listed here: tests/contract/test_one_door.py checks the list against
# the scripts' calls.
LIBRARIES = ("lib", "lib_pipelines")
PIPELINE_SCRIPTS = frozenset({"submit", "fire", "report", "reap", "cancel"})
FENCE = """-- fence: the caller's leader epoch is the last ARGV; nothing is written unless it is the current one
local CALLER_EPOCH = table.remove(ARGV)
if redis.call('GET', K.epoch) ~= CALLER_EPOCH then
  return redis.error_reply('FENCED: leader epoch ' .. tostring(CALLER_EPOCH) .. ' is not the current one ('
    .. tostring(redis.call('GET', K.epoch)) .. ')')
end"""


# lib.lua's now_ms() returns INJECTED_NOW when it is set, else Redis TIME. A production library renders it
# nil, so no argument and no key in Redis can change a production script's clock; a test library renders
# it from the last ARGV, which it appends (after the fence's epoch) to every call.
REDIS_TIME = "local INJECTED_NOW = nil"
INJECTED_TIME = """-- test clock: the caller's time (ms) is the last ARGV; only a ScriptLibrary built with a test clock sends it
local INJECTED_NOW = tonumber(table.remove(ARGV))"""


class Fenced(RuntimeError):
    """A write script refused this master's epoch: another master leads now."""


def log_failure(logger: logging.Logger, message: str, *args: object) -> None:
    """Log the exception being handled by a background loop that will try again. Redis unreachable or
    this master fenced off are expected (a Redis outage, a change of leader) and get one line; anything
    else is a bug and gets its traceback."""
    exc = sys.exc_info()[1]
    if isinstance(exc, (redis.exceptions.RedisError, Fenced)):
        logger.warning(message + ": %s", *args, exc)
    else:
        logger.exception(message, *args)


def script_source(name: str) -> str:
    """The raw text of one ``.lua`` file shipped with the package."""
    return resources.files("sparkyard").joinpath("scripts", f"{name}.lua").read_text()


def libraries(name: str) -> tuple[str, ...]:
    """The libraries of :data:`LIBRARIES` script ``name`` is rendered with, in order."""
    return LIBRARIES if name in PIPELINE_SCRIPTS else LIBRARIES[:1]


def render(name: str, keys: Keys, *, injected_time: bool = False) -> str:
    """The full source of script ``name`` as Redis runs it (``injected_time``: as a test library's)."""
    return "\n".join([
        f"-- sparkyard script {name} (namespace {keys.namespace})",
        keys.lua_prelude(),
        ids.lua_task_id(),
        lua_tables(),
        INJECTED_TIME if injected_time else REDIS_TIME,
        *(script_source(library) for library in libraries(name)),
        "" if name in UNFENCED else FENCE,
        script_source(name),
    ])


class NotReplicated(Unavailable, redis.exceptions.ConnectionError):
    """A write that too few replicas have (``--redis-min-replicas``): answered UNAVAILABLE to a client, and
    taken by the master's own loops as a Redis that cannot be written to for now (they retry)."""


class ScriptLibrary:
    """Every script, registered on one Redis client and callable by name.

    ``epoch`` is this master's leader epoch (0 until it leads: then every write is refused), sent with
    every fenced call. ``test_clock`` is for tests only: the scripts then measure every deadline against
    it instead of Redis ``TIME``, so a test moves time without waiting (a master never passes one).
    """

    def __init__(self, redis: Redis, keys: Keys, *, observe: Callable[[str, float], None] | None = None,
                 test_clock: Clock | None = None, min_replicas: int = 0) -> None:
        """``observe`` is told how long each call took (name, perf_counter at its start): the master's
        metrics. With ``min_replicas`` (``--redis-min-replicas``) no write is answered before that many
        replicas have it (:meth:`execute`)."""
        self._redis = redis
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(render(name, keys, injected_time=test_clock is not None))
            for name in SCRIPT_NAMES
        }
        self._test_clock = test_clock
        self.epoch = 0
        self.observe = observe
        self.min_replicas = min_replicas

    def _args(self, name: str, args: list[Any]) -> list[Any]:
        fenced = args if name in UNFENCED else [*args, self.epoch]
        return fenced if self._test_clock is None else [*fenced, round(self._test_clock.now() * 1000)]

    async def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        started = time.perf_counter()
        try:
            if self.min_replicas and name not in READ_ONLY:
                pipe = self._redis.pipeline(transaction=False)
                await self.queue(pipe, name, keys, args)
                (reply,) = await self.execute(pipe)
                return reply
            return await self._scripts[name](keys=keys, args=self._args(name, args))
        except ResponseError as exc:
            if str(exc).startswith("FENCED"):
                raise Fenced(str(exc)) from None
            raise
        finally:
            if self.observe is not None:
                self.observe(name, started)

    async def queue(self, pipeline: Any, name: str, keys: list[str], args: list[Any]) -> None:
        """Add a call to a pipeline (its reply comes from ``pipeline.execute()``, which raises redis'
        ResponseError ``FENCED: …`` if the epoch is not current)."""
        await self._scripts[name](keys=keys, args=self._args(name, args), client=pipeline)

    async def execute(self, pipeline: Any) -> list[Any]:
        """Run a pipeline of queued calls. With ``min_replicas``, a WAIT on the same connection follows them
        and their replies are given only once that many replicas have the writes: what a master hands out
        or acknowledges (a fencing token, a leader epoch, a result taken, a trigger) then survives the loss
        of the primary, since Sentinel promotes a replica that has it. Without it, a primary lost ~1 s after
        a write took its counters back with it, and the same fencing token was handed out twice (the
        nemesis soak, seed 11). Raises Unavailable when the replicas do not have them within
        REPLICA_WAIT_MS: the write may survive or not, so callers treat it as not done and retry."""
        if not self.min_replicas:
            return list(await pipeline.execute())
        pipeline.execute_command("WAIT", self.min_replicas, REPLICA_WAIT_MS)
        *replies, acked = await pipeline.execute()
        if int(acked) < self.min_replicas:
            raise NotReplicated(f"written to {acked} of the {self.min_replicas} replicas required "
                              f"(--redis-min-replicas) within {REPLICA_WAIT_MS} ms; try again")
        return replies
