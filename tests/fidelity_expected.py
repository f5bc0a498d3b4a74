"""The fidelity suite's cases, and what a real spark-submit gives for each: recorded by running them.

    .venv/bin/python tests/fidelity_expected.py          # run every program with spark-submit, write the record
    .venv/bin/python tests/fidelity_expected.py --check  # run them again and compare with the record

tests/integration/test_fidelity.py compares every runner with the record, tests/fidelity_expected.json,
instead of starting a cold spark-submit per program each time (most of the suite's cost). A record is
only valid for what it was made from, so it keeps the Spark version, the digest of the programs' directory
(tests/jobs/fidelity: the programs, their helper, their data) and each case's command line, and the test
refuses a record that does not match the checkout: change a program, a case or Spark, and this script
must be run again (and its output committed). The programs' outputs are deterministic — counts, flags,
names and relative paths, never a time, an absolute path or an id — which ``--check`` confirms.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import EXAMPLES, TEST_DRIVER_CONF  # noqa: E402
from sparkyard.worker.spark_home import spark_submit_path  # noqa: E402

PROGRAMS = EXAMPLES / "fidelity"
RECORD = Path(__file__).resolve().parent / "fidelity_expected.json"

STATIC_CONF = ["--conf", "spark.sql.globalTempDatabase=job_temp", "--conf", "spark.myapp.mode=on"]
SIZES = ["--driver-memory", "700m", "--executor-memory", "600m", "--executor-cores", "1", "--num-executors", "2"]
# program → (spark-submit options before it, its arguments besides --out, expected exit code), in the order
# the warm driver runs them; "prog.py#label" runs prog.py again at that point.
CASES: dict[str, tuple[list[str], list[str], int]] = {
    "warehouse.py": ([], [], 0),
    "clean_slate.py": ([], [], 0),
    "streaming.py": ([], [], 0),
    "clean_slate.py#after-stream": ([], [], 0),
    "builder_conf.py": ([], [], 0),
    "clean_slate.py#after-builder-conf": ([], [], 0),
    "flags.py": ([], ["--date", "2026-11-01", "--limit", "5", "data/part-1.txt", "data/part-2.txt"], 3),
    "process_state.py": ([], [], 0),
    "process_state.py#again": ([], [], 0),
    "listeners.py": ([], [], 0),
    "listeners.py#again": ([], [], 0),
    "hadoop_session.py": ([], ["--value", "one"], 0),
    "hadoop_session.py#two": ([], ["--value", "two"], 0),
    "static_conf.py": (STATIC_CONF, [], 0),
    "sizes.py": (SIZES, [], 0),
    "context_only.py": ([], [], 1),
    "leftovers.py": ([], [], 0),
    "clean_slate.py#after-leftovers": ([], [], 0),
}


def program(case: str) -> str:
    return case.split("#")[0]


def command(case: str) -> tuple[str, ...]:
    """What spark-submit is given for a case: its options, program and arguments."""
    options, args, _ = CASES[case]
    return (*options, program(case), *args)


# spark-submit runs each command line once (a fresh JVM: a case repeating another's command is the same run).
_FIRST: dict[tuple[str, ...], str] = {}
for _case in CASES:
    _FIRST.setdefault(command(_case), _case)
BASELINE = tuple(_FIRST.values())


def programs_digest() -> str:
    """The digest of every file under tests/jobs/fidelity (names and contents)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in PROGRAMS.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(PROGRAMS)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def spark_submit(where: Path, case: str, out: Path) -> int:
    """``spark-submit [options] prog.py --out OUT args…`` from ``where``: its exit code."""
    options, args, _ = CASES[case]
    done = subprocess.run([spark_submit_path(), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           "--conf", TEST_DRIVER_CONF, *options, program(case), "--out", str(out), *args], cwd=where,
                          capture_output=True, timeout=600, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    return done.returncode


def record() -> dict[str, object]:
    """Every program run once by spark-submit (two at a time), each from its own copy of the directory."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def run(case: str) -> tuple[int, object]:
            where = root / case
            shutil.copytree(PROGRAMS, where)
            out = root / f"{case}.json"
            code = spark_submit(where, case, out)
            return code, json.loads(out.read_text()) if out.exists() else None

        with ThreadPoolExecutor(2) as pool:
            done = dict(zip(map(command, BASELINE), pool.map(run, BASELINE)))
    return {"spark": spark_version(), "programs": programs_digest(),
            "cases": {case: {"options": CASES[case][0], "args": CASES[case][1], "exit_code": done[command(case)][0],
                             "output": done[command(case)][1]} for case in CASES}}


def load() -> dict[str, object]:
    """The committed record, refused (AssertionError naming the fix) when it was not made from this checkout."""
    made = json.loads(RECORD.read_text())
    again = "run `.venv/bin/python tests/fidelity_expected.py` and commit its record"
    assert made["spark"] == spark_version(), f"{RECORD.name} was recorded with Spark {made['spark']}: {again}"
    assert made["programs"] == programs_digest(), f"tests/jobs/fidelity changed since {RECORD.name} was recorded: {again}"
    recorded = {case: (c["options"], c["args"]) for case, c in made["cases"].items()}
    assert recorded == {case: (o, a) for case, (o, a, _) in CASES.items()}, f"the cases changed since: {again}"
    return made


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare a new run with the record, write nothing")
    args = parser.parse_args(argv)
    made = record()
    if args.check:
        committed = json.loads(RECORD.read_text())
        if committed != made:
            print(f"spark-submit now gives another record than {RECORD}:\n{json.dumps(made, indent=1)}")
            return 1
        print(f"{RECORD.name}: spark-submit gives the same again")
        return 0
    RECORD.write_text(json.dumps(made, indent=1, sort_keys=True) + "\n")
    print(f"wrote {RECORD}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
