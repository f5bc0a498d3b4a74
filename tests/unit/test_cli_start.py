"""The CLI parses its command line without loading the client's heavy modules, from a flag table that is what
the settings and job options generate today (issue #23: the CLI starts in ≤ 0.3 s; issue #21: settings are
defined once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What a command that talks to a master needs, and --help or an argument error must not wait for.
HEAVY = ("grpc", "google.protobuf", "pydantic", "pydantic_settings", "rich", "sparkyard.client", "sparkyard.v1")

PROBE = """
import json, sys
from sparkyard.cli.main import build_parser, main
argv = json.loads(sys.argv[1])
try:
    if argv:
        code = main(argv)
    else:  # a whole submit line, parsed only
        build_parser().parse_args(["submit", "--retries", "2", "--inputs", "in/*", "--parallelism", "4",
                                   "--cron", "0 3 * * *", "app.py", "x"])
        code = 0
except SystemExit as exc:
    code = exc.code
heavy = sorted({h for m in sys.modules for h in json.loads(sys.argv[2]) if m == h or m.startswith(h + ".")})
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize("argv", [["--help"], ["submit", "--help"], ["jobs", "--help"], ["submit"],
                                  ["jobs", "--limit", "many"], ["submit", "--retries", "2", "--retries", "3", "a:b"],
                                  []])
def test_help_argument_errors_and_parsing_import_no_client_modules(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(HEAVY)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["code"] in (0, 2, None)
    assert seen["heavy"] == [], f"sparkyard {' '.join(argv)} imported {seen['heavy']}"


def test_the_flag_table_is_what_the_definitions_generate() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "deploy" / "gen_cli_table.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "current" in done.stdout


@pytest.mark.parametrize("given, seen", [(None, "ERROR"), ("DEBUG", "DEBUG")])
def test_grpc_core_logs_only_errors_on_the_commands_stderr_unless_the_user_asks(
        monkeypatch: pytest.MonkeyPatch, given: str | None, seen: str) -> None:
    # gRPC's core reads GRPC_VERBOSITY once it starts: it must be set before the command's first call.
    from sparkyard.cli import commands, main

    if given is None:
        monkeypatch.delenv("GRPC_VERBOSITY", raising=False)
    else:
        monkeypatch.setenv("GRPC_VERBOSITY", given)
    verbosity: list[str | None] = []
    monkeypatch.setattr(commands, "run", lambda args: verbosity.append(os.environ.get("GRPC_VERBOSITY")) or 0)
    assert main.main(["jobs"]) == 0
    assert verbosity == [seen]


# A real command against a master that answers every call at once (a gRPC server with no services: each call
# is UNIMPLEMENTED, exit 1): the whole path runs (parsing, the client's settings, the channel, the call, the
# error line), and what it imported is looked at after.
SERVED = """
import json, sys
from concurrent import futures
import grpc
server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
from sparkyard.cli.main import main
code = main(["--master", f"127.0.0.1:{port}", *json.loads(sys.argv[1])])
server.stop(None)
heavy = sorted({h for m in sys.modules for h in json.loads(sys.argv[2]) if m == h or m.startswith(h + ".")})
print(json.dumps({"code": code, "heavy": heavy}))
"""
# Master's and worker's settings (pydantic-settings), and what only a job's options need (their parsers, cron,
# bundles): a command that only reads from the master loads none of them (docs/benchmarks.md, CLI start-up).
SETTINGS = ("pydantic", "pydantic_settings", "sparkyard.config", "sparkyard.config_load", "psutil")
JOB_OPTIONS = ("sparkyard.options", "sparkyard.spec", "sparkyard.bundle", "croniter", "pathspec")


@pytest.mark.parametrize("argv, light", [
    (["jobs"], SETTINGS + JOB_OPTIONS),
    (["status"], SETTINGS + JOB_OPTIONS),
    (["jobs", "--json"], SETTINGS + JOB_OPTIONS + ("rich",)),
    (["wait", "j1.0000000000000", "--json"], SETTINGS + JOB_OPTIONS + ("rich",)),
    (["logs", "t1"], SETTINGS + JOB_OPTIONS + ("rich",)),
    (["job", "nightly"], SETTINGS + JOB_OPTIONS),
    (["submit", "app.py:main", "--retries", "2"], SETTINGS + ("croniter",)),  # its options, not pydantic (no cron)
])
def test_a_command_that_talks_to_a_master_imports_no_settings_models(argv: list[str], light: tuple[str, ...],
                                                                     tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("def main():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("SPARKYARD_")}
    done = subprocess.run([sys.executable, "-c", SERVED, json.dumps(argv), json.dumps(light)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["code"] == 1 and f"sparkyard {argv[0]}: " in done.stderr, done.stderr  # the master was asked
    assert seen["heavy"] == [], f"sparkyard {' '.join(argv)} imported {seen['heavy']}"
