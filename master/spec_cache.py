"""The master's memory of job specs: a version's spec never changes once written, so it can be kept and
served without a round trip (task assignments, fixed-delay checks), and its stored text reused by the jobs
of a bulk submit that share one spec object.
"""

from __future__ import annotations

from collections import OrderedDict

from sparkyard.master.records import spec_to_text
from sparkyard.v1 import sparkyard_pb2 as pb

# Specs kept (latest versions, and older versions runs still use, each up to this many).
SPEC_CACHE_SIZE = 10_000
# Stored encodings of recently submitted spec objects (the jobs of a bulk submit share one object).
SPEC_TEXT_CACHE_SIZE = 256


class SpecCache:
    def __init__(self) -> None:
        self._latest: OrderedDict[str, tuple[int, pb.JobSpec]] = OrderedDict()
        self._old: OrderedDict[tuple[str, int], pb.JobSpec] = OrderedDict()
        self._texts: OrderedDict[int, tuple[pb.JobSpec, str]] = OrderedDict()

    def latest(self, job_id: str) -> pb.JobSpec | None:
        """A job's latest spec this master knows of (what it submitted, updated or read)."""
        cached = self._latest.get(job_id)
        return None if cached is None else cached[1]

    def get(self, job_id: str, version: int) -> pb.JobSpec | None:
        """The spec of ``version`` (0: the latest known), if kept."""
        cached = self._latest.get(job_id)
        if cached is not None and version in (0, cached[0]):
            self._latest.move_to_end(job_id)
            return cached[1]
        return self._old.get((job_id, version))

    def remember(self, job_id: str, spec: pb.JobSpec, version: int = 1) -> None:
        """Keep a job's spec of ``version``: as its latest unless a later one is known already."""
        cached = self._latest.get(job_id)
        if cached is not None and cached[0] > version:
            self._old[(job_id, version)] = spec
            if len(self._old) > SPEC_CACHE_SIZE:
                self._old.popitem(last=False)
            return
        if cached is not None and cached[0] < version:
            self.remember(job_id, cached[1], cached[0])  # still the spec of runs made before
        self._latest[job_id] = (version, spec)
        if len(self._latest) > SPEC_CACHE_SIZE:
            self._latest.popitem(last=False)

    def forget(self, job_id: str) -> None:
        self._latest.pop(job_id, None)

    def text(self, spec: pb.JobSpec) -> str:
        """The stored form of a spec, remembered per spec object (a bulk submit shares one)."""
        cached = self._texts.get(id(spec))
        if cached is not None and cached[0] is spec:
            return cached[1]
        text = spec_to_text(spec)
        self._texts[id(spec)] = (spec, text)
        if len(self._texts) > SPEC_TEXT_CACHE_SIZE:
            self._texts.popitem(last=False)
        return text
