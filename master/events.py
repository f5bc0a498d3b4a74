"""The master's events and the one dispatcher they go through.

A state change is decided by a Lua script; the component that ran the script publishes what it decided as
one of these events, once, and every reaction to it is a subscriber wired in the composition root
(:mod:`sparkyard.master.assembly`). So a run's end has one signal (``RunEnded``, published by the component
whose script ended the run) however many things follow from it (waiters woken, a fixed-delay job's next
fire time, child jobs, backfill steps, webhooks, metrics), and no component keeps a listener list or gets a
callback set on it after it was built.

Handlers run synchronously in the publisher's call, in the order they were subscribed; one that has work
to await spawns it (:class:`sparkyard.master.background.Background`). A handler's failure is logged and
does not stop the others: one broken reaction must not hide an event from the rest.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, TypeVar, Union

from sparkyard.states import RunState

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunEnded:
    """A run reached a final state (the script that ended it said so)."""

    run_id: str
    state: RunState

    @property
    def job_id(self) -> str:
        return self.run_id.split(".", 1)[0]


@dataclass(frozen=True, slots=True)
class JobEnded:
    """A job was cancelled or deleted: nothing of it will run any more."""

    job_id: str


@dataclass(frozen=True, slots=True)
class WorkReady:
    """Tasks may have become ready, or slots free: the slot scheduler should look again."""


@dataclass(frozen=True, slots=True)
class LeadershipGained:
    epoch: int


@dataclass(frozen=True, slots=True)
class LeadershipLost:
    why: str


Event = Union[RunEnded, JobEnded, WorkReady, LeadershipGained, LeadershipLost]
E = TypeVar("E", RunEnded, JobEnded, WorkReady, LeadershipGained, LeadershipLost)

WORK_READY = WorkReady()


class SealedError(RuntimeError):
    """A subscription after the dispatcher was sealed: wiring belongs in the composition root."""


class Events:
    """Typed publish/subscribe, wired once: :meth:`seal` ends subscribing before anything is published."""

    def __init__(self) -> None:
        self._handlers: dict[type, list[Callable[[object], None]]] = defaultdict(list)
        self._sealed = False

    def subscribe(self, kind: type[E], handler: Callable[[E], None]) -> None:
        if self._sealed:
            raise SealedError(f"subscribing to {kind.__name__} after the master was assembled")
        self._handlers[kind].append(handler)  # type: ignore[arg-type]

    def seal(self) -> None:
        self._sealed = True

    def subscribers(self, kind: type) -> int:
        return len(self._handlers.get(kind, ()))

    def publish(self, event: Event) -> None:
        for handler in self._handlers.get(type(event), ()):
            try:
                handler(event)
            except Exception:
                log.exception("handling %s failed in %s", event, getattr(handler, "__qualname__", handler))
