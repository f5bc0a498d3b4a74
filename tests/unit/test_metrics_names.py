"""The Grafana dashboard in deploy/ asks only for series the master and workers export."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from sparkyard.master.metrics import MasterMetrics
from sparkyard.worker.metrics import WorkerMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"


def _series(registry: CollectorRegistry) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
    return names


def test_every_series_the_dashboard_uses_is_exported() -> None:
    exported = _series(MasterMetrics().registry) | _series(WorkerMetrics().registry)
    panels = json.loads(DASHBOARD.read_text())["panels"]
    used = {name for panel in panels for target in panel["targets"]
            for name in re.findall(r"sparkyard_[a-z_]+", target["expr"])}
    assert used and used <= exported, sorted(used - exported)
