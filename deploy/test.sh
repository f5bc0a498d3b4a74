#!/usr/bin/env bash
# Installs Sparkyard with its test tools into ./.venv and runs the whole test suite:
# generated code current, type check, every import a declared dependency (deptry), then the fast tier
# (tests/unit), then contract, integration, fault and cluster tests (real Redis, gRPC, Spark); each in two
# processes (pytest-xdist; a test file stays on one, see tests/conftest.py). Extra arguments go to pytest
# instead (e.g. deploy/test.sh tests/unit -x; -n 0 runs in this process alone).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install.sh --test
.venv/bin/python deploy/gen_protos.py --check
.venv/bin/python -m mypy
.venv/bin/deptry .
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest -n 2 "$@"
fi
# The fast tier first (no Spark, no master or worker processes; about a minute on 2 cores): a broken unit
# fails the run before the slow tiers start.
.venv/bin/python -m pytest -n 2 tests/unit
exec .venv/bin/python -m pytest -n 2 tests/contract tests/integration tests/faults tests/cluster
