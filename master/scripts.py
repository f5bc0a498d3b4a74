"""Loading of the Lua scripts under ``common/scripts/`` (package data ``sparkyard/scripts``).

A script as sent to Redis is three parts:

1. a prelude generated from Python — ``K`` (key builders from :class:`sparkyard.keys.Keys`),
   ``task_id`` (from :mod:`sparkyard.ids`) and ``EDGES`` (transition tables from :mod:`sparkyard.states`),
   so none is ever written twice;
2. ``lib.lua``, the functions the scripts share;
3. the script's own body, whose header documents KEYS, ARGV and the invariant it keeps.

Each script is registered once and then called by SHA (``EVALSHA``); redis-py re-sends the source on
``NOSCRIPT`` after a Redis restart.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from sparkyard import ids
from sparkyard.keys import Keys
from sparkyard.states import lua_tables

SCRIPT_NAMES = (
    "submit", "fire", "peek", "claim", "renew", "report", "release", "reap", "cancel", "job_state",
    "reschedule", "bundle_gc",
)


def script_source(name: str) -> str:
    """The raw text of one ``.lua`` file shipped with the package."""
    return resources.files("sparkyard").joinpath("scripts", f"{name}.lua").read_text()


def render(name: str, keys: Keys) -> str:
    """The full source of script ``name`` as Redis runs it."""
    return "\n".join([
        f"-- sparkyard script {name} (namespace {keys.namespace})",
        keys.lua_prelude(),
        ids.lua_task_id(),
        lua_tables(),
        script_source("lib"),
        script_source(name),
    ])


class ScriptLibrary:
    """Every script, registered on one Redis client and callable by name."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(render(name, keys)) for name in SCRIPT_NAMES
        }

    async def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return await self._scripts[name](keys=keys, args=args)

    async def queue(self, pipeline: Any, name: str, keys: list[str], args: list[Any]) -> None:
        """Add a call to a pipeline (its reply comes from ``pipeline.execute()``)."""
        await self._scripts[name](keys=keys, args=args, client=pipeline)
