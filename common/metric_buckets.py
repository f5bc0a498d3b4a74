"""What the master's and the workers' metrics share: histogram buckets, so that a dashboard can set a
worker's attempt durations beside the master's task durations bucket for bucket, and the children of a
labelled metric looked up without a lock."""

from __future__ import annotations

from typing import Any

# Tasks run from tens of milliseconds (a warm driver's no-op) to hours (a nightly ETL).
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0)


class LabelChildren(dict[str, Any]):
    """A labelled metric's children by their one label value. prometheus-client's ``labels()`` takes a lock
    and checks the value on every call, and the hot paths (a result, an attempt's end) call it once or twice
    per task; this dict does it once per value. Only for metrics that are never cleared (a cleared metric
    drops the children held here)."""

    def __init__(self, metric: Any) -> None:
        super().__init__()
        self._metric = metric

    def __missing__(self, value: str) -> Any:
        child = self[value] = self._metric.labels(value)
        return child
