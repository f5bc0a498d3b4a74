"""A nightly ETL pipeline defined as code: extract → (orders, customers) → join → aggregate → publish.

    sparkyard apply examples/pipeline/etl.py          # create it (again: nothing changes)
    sparkyard trigger nightly-etl-id                  # one run now, besides the 03:00 UTC schedule

Every step is a PySpark function in steps.py, shipped by `apply`. Steps get the run's logical date as
{ds}; they read and write under DATA/{ds}/, so runs of different dates never mix.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkyard import Pipeline

DATA = os.environ.get("SPARKYARD_EXAMPLE_DATA", str(Path(__file__).resolve().parents[2] / ".sparkyard" / "etl-data"))

etl = Pipeline("nightly-etl", cron="0 3 * * *", max_active_runs=1, labels={"team": "data"})
extract = etl.step("extract", "steps.py:extract", args=[DATA, "{ds}"])
orders = etl.step("orders", "steps.py:clean_orders", args=[DATA, "{ds}"], after=[extract], retries=1)
customers = etl.step("customers", "steps.py:clean_customers", args=[DATA, "{ds}"], after=[extract])
join = etl.step("join", "steps.py:join", args=[DATA, "{ds}"], after=[orders, customers])
aggregate = etl.step("aggregate", "steps.py:aggregate", args=[DATA, "{ds}"], after=[join])
etl.step("publish", "steps.py:publish", args=[DATA, "{ds}"], after=[aggregate])
