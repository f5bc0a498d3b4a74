"""Fails on its first attempt and succeeds on the next: shows retries with backoff.

    sparkyard submit examples/flaky.py:main --retries 2 --backoff 1s --wait
"""

from __future__ import annotations

from typing import Any


def main(spark: Any, ctx: Any) -> dict[str, Any]:
    if ctx.attempt == 1:
        raise RuntimeError("simulated transient failure (attempt 1)")
    return {"attempt": ctx.attempt, "rows": spark.range(1000).count()}
