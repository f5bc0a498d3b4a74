"""A tiny micro-batch: records when it ran, to watch a recurring trigger.

    sparkyard submit examples/ticker.py:main --every 5s --max-runs 3
    sparkyard submit examples/ticker.py:main --cron "*/10 * * * * *" --tz Europe/Berlin --overlap forbid
"""

from __future__ import annotations

import time
from typing import Any


def main(spark: Any, ctx: Any) -> dict[str, Any]:
    late_ms = int(time.time() * 1000) - int(ctx.scheduled_at.timestamp() * 1000)
    return {"run": ctx.run_id, "scheduled_at": ctx.scheduled_at.isoformat(), "started_late_ms": late_ms,
            "rows": spark.range(10).count()}
