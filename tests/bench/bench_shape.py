"""The shape of the code, measured the same way on any tree of this project (issue #21's figures).

    .venv/bin/python tests/bench/bench_shape.py [--tree PATH] [--json] [--idle SECONDS] [--static]

``--tree`` is a checkout of this project (default: the one this file is in), e.g. an old commit added with
``git worktree add /tmp/shape-old <commit>``; it is measured with this checkout's virtualenv, from a copy of
its product laid out as the package (so the virtualenv's editable install does not matter).

1. **Product lines**: physical lines (blank and comment lines included) of the Python files under
   ``common/``, ``master/``, ``worker/`` (the generated ``common/v1/`` excluded) and of the Lua files in
   ``common/scripts/``; the 10 largest Python modules and every module over 400 lines.
2. **Import cycles**: strongly connected components with more than one module of grimp's import graph of
   package ``sparkyard`` (``sparkyard.v1`` excluded). grimp reads every import statement, including
   imports inside functions. Counted twice: with every import (the headline: an import under
   ``if TYPE_CHECKING:`` is still a dependency of the module's text) and with only the imports that run.
3. **Callbacks set after construction**: a static scan of the same Python files. A hit is an assignment
   (``=``, ``+=``, annotated, ``setattr(obj, …)``) to an attribute of anything but plain ``self`` or
   ``cls`` (so ``self.store.x = …`` counts: it sets ``x`` on another object), or an ``.append(…)`` /
   ``.add(…)`` onto a name or attribute ending in ``listeners``, ``handlers`` or ``callbacks``. Every hit
   is listed; it is a wide net (record and protobuf updates are caught too). Hits marked ``*`` look like a
   callback or a way back: the value is a lambda, ``self`` or reached from ``self`` (a bound method), or
   the attribute is named ``on_*``, or it is a registration onto a callback list.
4. **Modules one ``submit --wait`` enters** (skipped with ``--static``): shape_run.py starts ``sparkyard
   local --workers 1 --slots 1`` with a tracer (shape_trace/sitecustomize.py) in every Python process it
   starts — the CLI, ``sparkyard local``, master, worker, the worker's warm drivers and their PySpark
   Python workers — waits until the slot is warm, records an idle window of ``--idle`` seconds, runs
   ``sparkyard submit examples/wordcount.py:main --arg README.md --wait`` from the tree's root and stops
   the cluster with SIGTERM. A module is *entered* in a window when one of its functions (or its module
   body, i.e. its import) starts or resumes in a process during the window (50 ms buckets). Reported per
   process kind: the modules entered during the submit (from the CLI's start to the run's end), those
   entered in the last stretch of the idle window as long as the submit and in the whole idle window
   (background: heartbeats, timers, polls; the whole window catches the slower periodic work), and the
   submit's minus the whole idle window's, kind by kind; totals are distinct module names over all
   kinds. Lua: the distinct scripts named in ``EVALSHA``/``EVAL`` commands seen by Redis MONITOR on the
   master's embedded Redis in the same windows (each script also contains ``lib.lua``, some
   ``lib_pipelines.lua`` too, neither counted).
   The tracer slows every process: none of this is a timing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import shape_run  # noqa: E402
import shape_static  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def measure(tree: Path, idle_s: float, static_only: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="shape-", dir="/tmp") as tmp:
        work = Path(tmp)
        out: dict[str, Any] = {"tree": str(tree), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                               "lines": shape_static.lines(tree)}
        out["cycles"] = shape_static.import_cycles(shape_static.package_copy(tree, work / "static"))
        out["callbacks"] = shape_static.late_callbacks(tree)
        if not static_only:
            out["submit"] = shape_run.analyse(tree, shape_run.run(tree, work, idle_s))
    return out


def report(m: dict[str, Any]) -> None:
    lines = m["lines"]
    print(f"tree {m['tree']} — {m['date']}")
    print(f"\n1. product lines: Python {lines['python_lines']} in {lines['python_modules']} modules; "
          f"Lua {lines['lua_lines']} in {lines['lua_files']} files")
    for name, n in lines["largest"]:
        print(f"   {n:5d}  {name}")
    print(f"   modules over {shape_static.LIMIT_LINES} lines: {len(lines['over_limit'])}")
    for label, title in (("all_imports", "every import"), ("runtime_imports", "without TYPE_CHECKING imports")):
        cycles = m["cycles"][label]
        print(f"\n2. import cycles ({title}): {len(cycles)}")
        for members in cycles:
            print(f"   {len(members)} modules: {', '.join(members)}")
    hits = m["callbacks"]
    marked = sum(h["callable"] for h in hits)
    print(f"\n3. attributes set on other objects: {len(hits)} hits, {marked} of them callback-like (*)")
    for h in hits:
        print(f"   {'*' if h['callable'] else ' '} {h['where']}")
    if "submit" in m:
        report_submit(m["submit"])


def report_submit(s: dict[str, Any]) -> None:
    print(f"\n4. one `submit --wait`: {s['submit_seconds']} s (traced); idle window {s['idle_seconds']} s")
    print(f"   traced processes: {', '.join(f'{k} ×{n}' for k, n in s['processes'].items())}")
    if not s["drivers_traced"]:
        print("   NOTE: no driver process was traced: the worker's drivers did not inherit PYTHONPATH")
    if s["not_exited_normally"]:
        print(f"   NOTE: ended without running atexit (recorded up to their last second): "
              f"{', '.join(s['not_exited_normally'])}")
    if s["modules_not_from_tree"]:
        print(f"   NOTE: modules loaded from outside the measured tree: {', '.join(s['modules_not_from_tree'])}")
    print(f"   product modules entered during the submit: {s['entered_total']}; idle, as long as the submit: "
          f"{s['idle_same_length_total']}; idle, whole window: {s['idle_whole_total']}; "
          f"during the submit and not in the whole idle window (kind by kind): {s['net_total']}")
    kinds = sorted(set(s["entered"]) | set(s["idle_whole"]))
    for kind in kinds:
        print(f"   [{kind}] submit {len(s['entered'].get(kind, []))}, idle as long "
              f"{len(s['idle_same_length'].get(kind, []))}, idle whole {len(s['idle_whole'].get(kind, []))}")
        print(f"      submit: {', '.join(s['entered'].get(kind, [])) or '-'}")
        print(f"      submit - idle: {', '.join(s['net'].get(kind, [])) or '-'}")
    note = "" if s["lua_named"] else " (no script sources found in the master: SHAs shown)"
    for label, key in (("during the submit", "lua_submit"), ("idle, as long as the submit", "lua_idle_same_length"),
                       ("idle, whole window", "lua_idle_whole"), ("submit - idle", "lua_net")):
        print(f"   Lua scripts {label}: {len(s[key])} ({', '.join(s[key])})")
    if note:
        print(f"  {note}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="checkout to measure (default: this one)")
    parser.add_argument("--json", action="store_true", help="print the measures as JSON")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle cluster recorded before the submit")
    parser.add_argument("--static", action="store_true", help="skip the traced submit (measures 1-3 only)")
    args = parser.parse_args()
    measures = measure(args.tree.resolve(), args.idle, args.static)
    if args.json:
        print(json.dumps(measures, indent=1))
    else:
        report(measures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
