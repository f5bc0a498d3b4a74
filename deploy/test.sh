#!/usr/bin/env bash
# Installs Sparkyard with its test tools into ./.venv and runs the whole test suite:
# generated code current, type check, every import a declared dependency (deptry), unit + integration +
# fault tests (real Redis, gRPC, Spark), in two processes (pytest-xdist; a test file stays on one, see tests/conftest.py). Extra arguments go to pytest
# (e.g. deploy/test.sh tests/unit -x; -n 0 runs in this process alone).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install.sh --test
.venv/bin/python deploy/gen_protos.py --check
.venv/bin/python -m mypy
.venv/bin/deptry .
exec .venv/bin/python -m pytest -n 2 "$@"
