"""Jobs found by name: the read side of the name index (``P:name:{name}``, kept by the write scripts).

A name is resolved with one set read plus a read of the jobs it names, whatever the number of jobs in the
namespace: a scan of every job (the listing's way of filtering by group) would cost a million reads at a
million jobs, on every ``sparkyard runs NAME``. Names need not be unique (a bulk submit makes many jobs of
one name); the client turns a name into an id only when exactly one job has it (common/client.py).
"""

from __future__ import annotations

import asyncio

from sparkyard.master.records import JobRecord
from sparkyard.master.store import Store
from sparkyard.states import JobState

# Jobs read per round while filtering a name's jobs (newest first) down to a listing's limit.
_PAGE = 100


async def jobs_named(store: Store, name: str, limit: int, state: JobState | None, group: str) -> list[JobRecord]:
    """The jobs with this name, newest first, filtered by state and group before ``limit`` counts. A
    pipeline's step jobs are never in the index (their pipeline is)."""
    job_ids = list(reversed(await store.job_ids_named(name)))  # oldest first (lib.lua name_index)
    out: list[JobRecord] = []
    for start in range(0, len(job_ids), _PAGE):
        page = await asyncio.gather(*(store.get_job(j) for j in job_ids[start:start + _PAGE]))
        for rec in page:
            if rec is None or (state is not None and rec.state != state) or (group and rec.spec.group != group):
                continue
            out.append(rec)
            if len(out) == limit:
                return out
    return out
