"""A Spark Declarative Pipeline as a task: ``sparkyard.worker.sdp:run`` (a pipeline's ``p.sdp_step``).

Spark's declarative pipelines (``pyspark.pipelines``: materialized views, streaming tables, flows, the
``spark-pipelines`` CLI) run over Spark Connect: a client registers the definitions of a pipeline spec
(``spark-pipeline.yml`` and the Python/SQL files it includes) in a dataflow graph on the server, starts a run,
and reads its events. This function is that client, run as an ordinary attempt of the connect runner — its
session is the attempt's own (tagged, so a cancel or timeout interrupts the run's stream; every Spark job of
it, its flows included, cancelled with it where the server has Sparkyard's plugin, worker/connect_plugin.py;
released at the end) — so the pipeline gets our triggers, retries, fencing and graph around it.

Args: the spec's path (relative to the working directory: the shipped bundle), then optionally
``--full-refresh-all``, ``--full-refresh A,B`` or ``--refresh A,B`` as spark-pipelines takes them. Every
event is written to the attempt's log; the result is each flow's last state and the run's, e.g.
``{"run": "COMPLETED", "flows": {"spark_catalog.default.orders": "COMPLETED"}}``. A run that does not
complete fails the attempt, naming the flows that failed.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

# "Flow spark_catalog.default.x is RUNNING." / "Flow … has COMPLETED." / "Run is COMPLETED."
_FLOW = re.compile(r"Flow (\S+) (?:is|has) ([A-Z_]+)")
_RUN = re.compile(r"Run is ([A-Z_]+)")


class PipelineFailed(RuntimeError):
    """The declarative pipeline's run ended otherwise than COMPLETED."""


def _arguments(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sparkyard.worker.sdp", exit_on_error=False)
    parser.add_argument("spec")
    parser.add_argument("--full-refresh-all", action="store_true")
    parser.add_argument("--full-refresh", default="")
    parser.add_argument("--refresh", default="")
    try:
        return parser.parse_args(args)
    except (argparse.ArgumentError, SystemExit):
        raise ValueError(f"a declarative pipeline step takes SPEC [--full-refresh-all | --full-refresh A,B | "
                         f"--refresh A,B], not {args}") from None


def run(spark: Any, ctx: Any) -> dict[str, Any]:
    options = _arguments(list(ctx.args))
    if not hasattr(spark, "client"):  # a classic session: declarative pipelines need Spark Connect
        raise ValueError("a Spark declarative pipeline runs over Spark Connect: give the step runner='connect'")
    from pyspark.pipelines.cli import load_pipeline_spec, register_definitions
    from pyspark.pipelines.spark_connect_graph_element_registry import SparkConnectGraphElementRegistry
    from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run

    spec_path = Path(options.spec).resolve()
    if not spec_path.is_file():
        raise FileNotFoundError(f"pipeline spec {options.spec} not found in {Path.cwd()} (ship it with the step)")
    spec = load_pipeline_spec(spec_path)
    for key, value in spec.configuration.items():
        spark.conf.set(key, value)
    graph = create_dataflow_graph(spark, default_catalog=spec.catalog, default_database=spec.database,
                                  sql_conf=spec.configuration)
    register_definitions(spec_path, SparkConnectGraphElementRegistry(spark, graph), spec, spark, graph)
    events = start_run(spark, graph, full_refresh=[n for n in options.full_refresh.split(",") if n],
                       full_refresh_all=options.full_refresh_all,
                       refresh=[n for n in options.refresh.split(",") if n], dry=False, storage=spec.storage)
    flows: dict[str, str] = {}
    outcome = ""
    for result in events:
        if "pipeline_event_result" not in result:
            continue
        message = result["pipeline_event_result"].event.message
        ctx.logger.info("%s", message)
        if found := _FLOW.search(message):
            flows[found.group(1)] = found.group(2)
        elif found := _RUN.search(message):
            outcome = found.group(1)
    if outcome != "COMPLETED":
        failed = sorted(name for name, state in flows.items() if state != "COMPLETED")
        raise PipelineFailed(f"declarative pipeline {spec_path.name} ended {outcome or 'without an outcome'}"
                             + (f"; flows not completed: {', '.join(failed)}" if failed else ""))
    return {"run": outcome, "flows": flows}
