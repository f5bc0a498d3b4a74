"""A condition that takes the worker's slots away while it holds: its disk full, its cluster manager gone.

Why one base: the worker's disk (worker/disk.py) and its Spark cluster manager (worker/engine.py) each
decide by their own probe whether the worker may start attempts, and each must act the same way when that
flips: record the problem (the worker's readiness reads it: worker/runners.py), log the change once — a
condition that persists, or only changes its wording (another errno, another refused connection), is not
news, or an outage would log a line a probe — and tell the listener the composition root wired
(worker/assembly.py), which hands the slots' attempts back and tells the master. Written once here, the two
cannot drift apart in what counts as a change.
"""

from __future__ import annotations

import logging
from typing import Callable


class Condition:
    """``problem`` is '' while the condition lets the worker start attempts, else one line saying why not.
    ``on_change`` is called on every change of ``problem``; ``log`` gets one line a change: ``held`` (what
    the worker does while the problem holds) after the problem, or ``cleared`` when it is gone."""

    def __init__(self, log: logging.Logger, held: str, cleared: str,
                 on_change: Callable[[str], None] | None = None) -> None:
        self.problem = ""
        self._log = log
        self._held = held
        self._cleared = cleared
        self._on_change = on_change or (lambda problem: None)

    def listen(self, on_change: Callable[[str], None]) -> None:
        self._on_change = on_change

    def _change(self, problem: str) -> None:
        """Record ``problem`` ('' = none): logged and told only when the condition flips."""
        if problem == self.problem or (problem and self.problem):  # still the same outage: not news
            return
        self.problem = problem
        if problem:
            self._log.warning("%s: %s", problem, self._held)
        else:
            self._log.info("%s", self._cleared)
        self._on_change(problem)
