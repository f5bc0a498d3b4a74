"""A page of the jobs listing whose cost is bounded whatever the number of jobs held.

A filter (a state, a group, a search) looks at the jobs index newest first; with a million jobs and no
match, filling a page would read every job on every request. So one request reads at most ``budget``
entries of the index and answers the cursor where the next request resumes: paging through all jobs takes
many requests, each of them a count and a bounded range of the index (master/redis_reads.py ``scan_jobs``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from sparkyard import ids
from sparkyard.errors import InvalidArgument
from sparkyard.master.records import JobRecord
from sparkyard.master.store import Store

# Index entries read per round while filling a page.
_ROUND = 200
_CURSOR = re.compile(rf"\d{{1,15}}:{ids.JOB_ID.pattern}")


@dataclass(frozen=True)
class JobPage:
    jobs: list[JobRecord]
    next: str  # the cursor of the next page ('' : nothing more)
    scanned: int  # index entries looked at


def check_cursor(after: str) -> str:
    """A cursor is ``created_ms:job_id`` as a page answered it; anything else is named in one line."""
    if after and not _CURSOR.fullmatch(after):
        raise InvalidArgument(f"after: {after!r} is not a page cursor (as the previous page answered it)")
    return after


async def job_page(store: Store, limit: int, keep: Callable[[JobRecord], bool], after: str,
                   budget: int, *, paused: bool = False, pipelines: bool = False) -> JobPage:
    """Up to ``limit`` jobs that ``keep`` accepts, newest first after cursor ``after``, from at most
    ``budget`` index entries (at least ``limit``); ``paused``: from the index of the paused jobs, which a
    filter on that state reads instead of every job; ``pipelines``: from the index of the pipelines (when
    not ``paused``)."""
    cursor, scanned = check_cursor(after), 0
    out: list[JobRecord] = []
    budget = max(budget, limit)
    while scanned < budget:
        count = min(max(_ROUND, limit - len(out)), budget - scanned)
        jobs, following = await store.scan_jobs(cursor, count, paused=paused, pipelines=pipelines)
        scanned += count if following else len(jobs)
        for job, after_it in jobs:
            if keep(job):
                out.append(job)
                if len(out) == limit:
                    return JobPage(out, after_it, scanned)
        cursor = following
        if not cursor:
            return JobPage(out, "", scanned)
    return JobPage(out, cursor, scanned)
