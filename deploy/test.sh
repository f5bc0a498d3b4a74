#!/usr/bin/env bash
# Installs Sparkyard with its test tools into ./.venv and runs the whole test suite:
# generated code current, type check, every import a declared dependency (deptry), package seams
# (import-linter), then the fast tier (tests/unit, two processes), then contract, integration, fault and cluster
# tests (real Redis, gRPC, Spark) in three processes (pytest-xdist; a test file stays on one, the longest files
# go out first: tests/file_order.py) with a 3-minute nemesis soak (tests/soak) beside them. Extra arguments go
# to pytest instead (two processes), and the soak is not run (e.g. deploy/test.sh tests/unit -x; -n 0 runs in
# this process alone).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install.sh --test
if [ "$#" -eq 0 ]; then
  # The test drivers' class archive (tests/make_class_archive.py) made beside the checks and the fast tier, so
  # that the slow tiers' first Spark tests do not all wait for it.
  archive_log="$(mktemp)"
  .venv/bin/python tests/make_class_archive.py > "$archive_log" 2>&1 &
  archive=$!
  trap 'kill "$archive" 2>/dev/null || true; rm -f "$archive_log"' EXIT  # a check failed before it ended
fi
.venv/bin/python deploy/gen_protos.py --check
.venv/bin/python deploy/gen_cli_table.py --check
.venv/bin/python -m mypy
.venv/bin/deptry .
# The import contracts of pyproject.toml (client, master and worker meet only in the shared modules).
# lint-imports reads the package as it is installed, from a throwaway install: an editable install keeps
# sparkyard.master and sparkyard.worker in folders beside common/, out of the tool's sight. It is built
# from a copy, so that no build/ left by an earlier build brings back a module since deleted.
layout="$(mktemp -d)"
mkdir "$layout/src"
cp -r pyproject.toml README.md common master worker "$layout/src"
.venv/bin/python -m pip install --quiet --no-deps --no-build-isolation --target "$layout/lib" "$layout/src"
PYTHONPATH="$layout/lib" .venv/bin/lint-imports --no-logo --no-cache
rm -rf "$layout"
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest -n 2 "$@"
fi
# The fast tier first (no Spark, no master or worker processes; about a minute on 2 cores): a broken unit
# fails the run before the slow tiers start.
.venv/bin/python -m pytest -n 2 tests/unit
wait "$archive" || echo "making the test class archive failed: the tests make it, or run without" >&2
cat "$archive_log"
# The slow tiers in three processes: a third fills the time the other two spend waiting (leases, restarts,
# a cron's next second) — on 2 cores 521 s against 646 s with two, and four were no faster (docs/benchmarks.md,
# "The test suite's own time"). Beside them the nemesis soak (its own minutes; docs/reliability.md): random
# overlapping faults for 3 minutes with a fixed seed, then the ledger checked; without CAP_NET_ADMIN it says
# why it skips. Its drivers start as the tests' do (--suite-jvm): at the default JVM options a fresh machine's
# soak made a class archive of its own and cost ~157 CPU-seconds instead of ~93. Its output is shown when both
# have ended; either failing fails the run.
soak_log="$(mktemp)"
.venv/bin/python tests/soak/soak.py --minutes 3 --seed 22 --suite-jvm > "$soak_log" 2>&1 &
soak=$!
slow=0
.venv/bin/python -m pytest -n 3 tests/contract tests/integration tests/faults tests/cluster || slow=$?
soaked=0
wait "$soak" || soaked=$?
echo "==== nemesis soak: 3 minutes, seed 22 (tests/soak/soak.py), run beside the slow tiers ===="
cat "$soak_log"
rm -f "$soak_log"
if [ "$slow" -ne 0 ] || [ "$soaked" -ne 0 ]; then
  echo "slow tiers exited $slow, soak exited $soaked" >&2
  exit 1
fi
