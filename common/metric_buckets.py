"""Histogram buckets that the master's and the workers' metrics share, so that a dashboard can set a
worker's attempt durations beside the master's task durations bucket for bucket."""

from __future__ import annotations

# Tasks run from tens of milliseconds (a warm driver's no-op) to hours (a nightly ETL).
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0)
