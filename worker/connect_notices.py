"""What an attempt under the connect runner is told, once each, about what Spark Connect does differently
from spark-submit: the lines worker/connect_plans.py's findings call for.

Why its own module: the findings come from every thread of the attempt (each plan on its way to the
server), and each line is said at most once per attempt, so the lines, what was said and the attempt's own
tables (a read of any other is said) are one piece of state, begun with each attempt.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from sparkyard.worker import connect_plans


class AttemptNotices:
    """The lines one attempt's findings call for, each said once (any thread)."""

    def __init__(self, warn: Callable[[str], None], connect: dict[str, Any],
                 warehouse: Callable[[], str]) -> None:
        self._warn = warn
        self._connect = connect  # the task's connect settings: where the server resolves paths and functions
        self._warehouse = warehouse  # the server's warehouse, asked only when a line names it
        self._said: set[str] = set()
        self._lock = threading.Lock()
        self._own_tables = connect_plans.OwnTables()

    @property
    def wants_functions(self) -> bool:
        """Whether a plan's Python functions are still worth looking for (the expression walk is ~20× the
        relation walk): only where they do not start in the attempt's directory, and until said."""
        return not self._connect["functions_follow"] and "python" not in self._said

    def tell(self, found: connect_plans.Findings) -> None:
        connect = self._connect
        elsewhere = connect["paths_elsewhere"]
        unmade = self._own_tables.others(found)
        if found.relative and elsewhere and self._first("paths"):
            self._warn(f"relative paths given to Spark ({', '.join(repr(p) for p in found.relative[:3])}) "
                       f"resolve on the Spark Connect server, not in this attempt's working directory "
                       f"({elsewhere}): give Spark absolute paths under this runner")
        if found.sql_relative and not elsewhere and self._first("sql paths"):
            self._warn(f"relative paths inside SQL text ({', '.join(repr(p) for p in found.sql_relative[:3])}) "
                       "resolve on the Spark Connect server, in its own directory, not in this attempt's (the "
                       "client makes the paths of readers, writers and streams absolute, not those in SQL): "
                       "give them absolute, or use --runner session or --runner submit")
        if found.catalog_reads and not found.catalog and self._first("catalog read"):
            self._warn(f"{found.catalog_reads[0]}: under the connect runner the catalog is the Spark Connect "
                       "server's, shared by every job on that server: it shows what other jobs left there; "
                       "spark-submit starts each program with an empty catalog: use --runner session or --runner "
                       "submit for that")
        if found.catalog and self._first("catalog"):
            self._warn(f"{found.catalog[0]}: under the connect runner tables, views and databases go to the "
                       f"Spark Connect server's catalog and warehouse ({self._warehouse()}), shared by every job "
                       "on that server and kept after this attempt; spark-submit starts each program with an "
                       "empty catalog and ./spark-warehouse beside it: use --runner session or --runner submit "
                       "for that")
        if unmade and self._first("named read"):
            call, name = unmade[0]
            what = f"SQL … FROM {name}" if call == connect_plans.SQL_READ else f"{call}({name!r})"
            self._warn(f"{what} reads a table or view this attempt did not create: under the connect "
                       "runner the name resolves in the Spark Connect server's catalog, shared by every job on that "
                       "server, so it may read what another job left there; spark-submit starts each program with "
                       "an empty catalog, where this read fails: create it in the attempt, or use --runner session "
                       "or --runner submit")
        if found.functions and not connect["functions_follow"] and self._first("python"):
            under = f" (under {connect['functions_dir']})" if connect["functions_dir"] else ""
            self._warn(f"{found.functions[0]} runs in the Spark Connect server's Python workers, whose working "
                       f"directory is a scratch directory of this attempt's session on the server{under}, where "
                       "the job's --files are, so any other relative path it opens resolves there, not in this "
                       "attempt's working directory as under spark-submit: give it absolute paths, or use --runner "
                       "session or --runner submit")

    def _first(self, what: str) -> bool:
        with self._lock:
            first = what not in self._said
            self._said.add(what)
        return first
