"""The console's backfill body, read as `sparkyard backfill`'s flags are: one line naming a bad field."""

from __future__ import annotations

from typing import Any

import pytest

from sparkyard.errors import InvalidArgument
from sparkyard.master.console_params import backfill_request

JOB = "j" + "0" * 21
GOOD = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T01:00:00+01:00", "max_concurrent": 3}


def test_a_good_body_is_the_backfill_request() -> None:
    request = backfill_request(JOB, GOOD)
    assert request.job_id == JOB and request.max_concurrent == 3
    assert request.start.ToSeconds() == 1_793_491_200 and request.end.ToSeconds() == 1_793_491_200 + 86_400
    assert backfill_request(JOB, {k: v for k, v in GOOD.items() if k != "max_concurrent"}).max_concurrent == 1
    assert backfill_request(JOB, {**GOOD, "max_concurrent": "2"}).max_concurrent == 2  # a form's text


@pytest.mark.parametrize(("change", "first_words"), [
    ({"start": None}, "start: required"),
    ({"end": "  "}, "end: required"),
    ({"start": "yesterday"}, "start: 'yesterday' is not an ISO 8601 time"),
    ({"end": "2026-11-02T00:00:00"}, "end: '2026-11-02T00:00:00' has no time zone offset"),
    ({"max_concurrent": "many"}, "max_concurrent: 'many' is not a whole number"),
    ({"max_concurrent": True}, "max_concurrent: True is not a whole number"),
    ({"max_concurrent": 0}, "max_concurrent: 0 is not a count of runs"),
    ({"max_concurrent": 2**40}, "max_concurrent: 1099511627776 is not a count of runs"),
    ({"from": "2026-11-01T00:00:00Z"}, "from: not a backfill field"),
])
def test_a_bad_field_is_named(change: dict[str, Any], first_words: str) -> None:
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(InvalidArgument) as raised:
        backfill_request(JOB, body)
    assert str(raised.value).startswith(first_words) and "\n" not in str(raised.value)
