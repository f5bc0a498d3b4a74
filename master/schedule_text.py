"""A job's trigger in words, for the console ("At 03:00, Monday through Friday (Europe/Berlin)").

Cron expressions are described by the ``cron-descriptor`` package (the usual library for it, kept up to
date; it reads 5 fields, and 6 with seconds first as Sparkyard's Quartz-style cron does); the other
triggers are short enough to say here.
"""

from __future__ import annotations

import functools

from cron_descriptor import ExpressionDescriptor, Options

from sparkyard.timeutil import format_duration, rfc3339_ms
from sparkyard.v1 import sparkyard_pb2 as pb


@functools.lru_cache(maxsize=4096)
def _cron(expr: str, tz: str) -> str:
    """Kept: describing an expression takes ~0.3 ms, and the console's jobs page, refreshed every few
    seconds, describes the same hundred jobs each time."""
    options = Options()
    options.use_24hour_time_format = True
    try:
        text = ExpressionDescriptor(expr, options).get_description()
    except Exception:  # a stored expression the describer cannot read: say it as it is
        text = f"cron {expr}"
    return f"{text} ({tz or 'UTC'})"


def describe(trigger: pb.Trigger, parent_name: str = "") -> str:
    """The trigger in words; bounds (start, end, max runs) follow the schedule. A child job's parent is said
    by ``parent_name`` when given (its id follows it)."""
    kind = trigger.WhichOneof("kind") or "now"
    if kind == "cron":
        text = _cron(trigger.cron.expr, trigger.cron.tz)
    elif kind == "every":
        text = f"Every {format_duration(trigger.every.interval.ToMilliseconds() / 1000)}"
        if trigger.every.fixed_delay:
            text += " after the previous run ends"
    elif kind == "delay":
        text = f"Once, {format_duration(trigger.delay.ToMilliseconds() / 1000)} after submission"
    elif kind == "after":
        ends = {pb.AFTER_FAILED: "fails", pb.AFTER_ALWAYS: "ends"}.get(trigger.after.when, "succeeds")
        parent = f"{parent_name} ({trigger.after.job_id})" if parent_name else trigger.after.job_id
        text = f"After each run of job {parent} that {ends}"
    elif kind == "at":
        text = f"Once, at {rfc3339_ms(trigger.at.ToMilliseconds())}"
    elif kind == "manual":
        text = "When triggered (no schedule)"
    else:
        text = "Once, at submission"
    if trigger.HasField("start_at"):
        text += f", from {rfc3339_ms(trigger.start_at.ToMilliseconds())}"
    if trigger.HasField("end_at"):
        text += f", until {rfc3339_ms(trigger.end_at.ToMilliseconds())}"
    if trigger.max_runs:
        text += f", at most {trigger.max_runs} runs"
    return text
