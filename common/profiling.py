"""Opt-in profiling of a whole process: ``SPARKYARD_PROFILE=/path/stats.prof sparkyard-master …``.

The event loop thread is profiled with cProfile from start to exit and the stats are written to the
file (read them with ``python -m pstats``). For performance work; off unless the variable is set.
"""

from __future__ import annotations

import cProfile
import os
from contextlib import contextmanager
from typing import Iterator

ENV = "SPARKYARD_PROFILE"


@contextmanager
def profiled() -> Iterator[None]:
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(path)
