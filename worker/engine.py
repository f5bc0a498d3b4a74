"""Whether the Spark cluster manager of the worker's ``--spark-master`` answers: the worker's engine.

Why the worker watches it: a warm driver whose standalone master went away does not notice in a way the
worker sees — its application keeps asking for executors ("Unable to reach the cluster manager", thousands
of lines a minute) and its attempt hangs until its timeout, while the worker kept offering slots. And a
driver that outlived its cluster manager is useless even once the manager is back at the same address:
Spark does not register an application again with a restarted master (without master recovery the new
master does not know it). So while the manager does not answer the worker offers no slot, says
``degraded`` with the reason, hands back the attempts it holds, and its runners drop what is bound to the
old application; when the manager answers again they start afresh.

Only ``spark://HOST:PORT[,HOST:PORT…]`` (standalone, reachable when any of its masters accepts a TCP
connection) and ``k8s://…`` (the API server) name an address; ``local[…]`` has no manager and ``yarn``
finds its ResourceManager through the Hadoop configuration, so neither is probed. A manager is declared
gone after ``DOWN_AFTER`` failed probes in a row (a short hiccup does not cost the warm drivers).

The engine watched is the one the worker's default runner (``--runner``, whose slots the worker offers) runs
its Spark on: a connect runner given ``--connect-url`` runs it on that server's cluster, not on
``--spark-master``, so nothing is probed here (worker/connect_server.py probes the server itself, and a
``--spark-master`` it does not use must not take its slots away).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable
from urllib.parse import urlsplit

from sparkyard.worker.readiness import Condition

log = logging.getLogger(__name__)

# How often the cluster manager is probed, and how long one probe may take.
PROBE_S = 1.0
PROBE_TIMEOUT_S = 2.0
# Failed probes in a row before the manager is declared unreachable.
DOWN_AFTER = 3


async def answers(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """'' when something accepts connections on (host, port), else why not (one line)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (OSError, asyncio.TimeoutError) as exc:
        return str(exc) or type(exc).__name__
    writer.close()
    return ""


def manager_addresses(spark_master: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of the cluster manager a Spark master URL names; [] when it names none."""
    if spark_master.startswith("spark://"):
        pairs = []
        for part in spark_master.removeprefix("spark://").split(","):
            host, _, port = part.rpartition(":")
            if host and port.isdigit():
                pairs.append((host.strip("[]"), int(port)))
        return pairs
    if spark_master.startswith("k8s://"):
        url = urlsplit(spark_master.removeprefix("k8s://"))
        if url.hostname:
            return [(url.hostname, url.port or (443 if url.scheme != "http" else 80))]
    return []


def watched_master(runner: str, spark_master: str, connect_url: str) -> str:
    """The Spark master URL whose cluster manager the default runner depends on ('' for none)."""
    return "" if runner == "connect" and connect_url else spark_master


class Engine(Condition):
    """The cluster manager's reachability: ``problem`` is '' while it answers (or is not probed), else one
    line naming it and why it does not. ``on_change`` is called on every change of ``problem``."""

    def __init__(self, spark_master: str, on_change: Callable[[str], None] | None = None) -> None:
        super().__init__(log, "no slot offered, held tasks handed back, until it answers again",
                         f"Spark master {spark_master} answers again", on_change)
        self.spark_master = spark_master
        self.addresses = manager_addresses(spark_master)
        self._failures = 0

    async def probe(self) -> str:
        """'' when one of the manager's addresses accepts a connection, else why none does."""
        reasons = []
        for host, port in self.addresses:
            reason = await answers(host, port)
            if not reason:
                return ""
            reasons.append(reason)
        return "; ".join(reasons)

    def observed(self, reason: str) -> None:
        """The outcome of one probe ('' = answered)."""
        self._failures = self._failures + 1 if reason else 0
        if reason and self._failures < DOWN_AFTER:
            return
        self._change(f"Spark master {self.spark_master} unreachable ({reason})" if reason else "")

    async def run(self) -> None:
        """Probe until cancelled (returns at once when the master names no address)."""
        if not self.addresses:
            return
        while True:
            self.observed(await self.probe())
            await asyncio.sleep(PROBE_S)
