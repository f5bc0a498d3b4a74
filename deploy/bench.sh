#!/usr/bin/env bash
# Installs Sparkyard with the benchmarks' peers (Celery) into ./.venv and runs the throughput benchmark:
# Sparkyard's default configuration (2 workers x 2 slots, isolated session runner) against Celery of the
# same shape, in the same run. Arguments go to tests/bench/bench_throughput.py (see its docstring).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install.sh --bench
exec .venv/bin/python tests/bench/bench_throughput.py "$@"
