"""The peer of the throughput benchmark: a Celery app whose one task does nothing (like Sparkyard's no-op).

Its broker and result backend are the benchmark's own redis-server (databases 1 and 2), given by the
environment the benchmark starts the Celery workers with. Everything else is Celery's default: what a new
user gets (prefork pool, prefetch multiplier 4, acks on receipt).
"""

from __future__ import annotations

import os

from celery import Celery

app = Celery("sparkyard_bench_peer", broker=os.environ["BENCH_CELERY_BROKER"],
             backend=os.environ["BENCH_CELERY_BACKEND"])
app.conf.update(worker_hijack_root_logger=False, result_expires=3600)


@app.task
def noop(i: int) -> int:
    return i
