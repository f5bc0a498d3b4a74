#!/usr/bin/env bash
# Installs Sparkyard into ./.venv (or SPARKYARD_VENV) and runs the example jobs on an embedded local cluster
# (Redis + master + 2 workers), then stops it. Needs Python >= 3.11 and Java 17.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install.sh
exec "${SPARKYARD_VENV:-.venv}/bin/python" deploy/quickstart.py
