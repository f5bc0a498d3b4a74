"""Runs the CLI as ``sparkyard ARGS…`` does, counting the bytes of every reply it fetched from the master.

    .venv/bin/python tests/bench/cli_fetched.py submit noop.py:main --inputs 'in/*' --wait --json

What the command prints goes to stdout as usual; at exit one JSON line on stderr, prefixed ``fetched:``,
gives per gRPC method the calls made and the serialised bytes of their replies (every unary call of the
client goes through ``LeaderCalls.call``, sparkyard.leader_calls), so that a benchmark can set what the CLI fetched beside what it
printed (tests/bench/bench_cli_start.py).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from sparkyard.cli.main import main
from sparkyard.leader_calls import LeaderCalls

fetched: dict[str, dict[str, int]] = {}
_call = LeaderCalls.call


def _counted(self: LeaderCalls, service: str, method: str, request: Any, timeout: float | None = None) -> Any:
    reply = _call(self, service, method, request, timeout)
    seen = fetched.setdefault(method, {"calls": 0, "bytes": 0})
    seen["calls"] += 1
    seen["bytes"] += reply.ByteSize()
    return reply


if __name__ == "__main__":
    LeaderCalls.call = _counted  # type: ignore[method-assign]
    code = main(sys.argv[1:])
    print("fetched: " + json.dumps(fetched), file=sys.stderr)
    sys.exit(code)
