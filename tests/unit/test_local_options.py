"""``sparkyard local`` offers only what it uses (issue 25 item 7): it starts its own master, plaintext on
loopback, so ``--master``, ``--tls-*`` and ``--config`` mean nothing to it; and it says "ready" only when
every worker offers its slots, not when they have merely registered while their drivers still warm."""

from __future__ import annotations

import argparse

import pytest

from sparkyard.cli.local import still_warming
from sparkyard.cli.main import build_parser, main
from sparkyard.v1 import sparkyard_pb2 as pb


def _verb_parser(verb: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[verb]


@pytest.mark.parametrize("verb, offered", [
    ("local", {"--json", "--token", "--token-file", "--workers", "--slots", "--listen", "--http", "--data-dir",
               "--runner"}),
    ("certs", {"--json", "--host"}),
])
def test_a_verb_that_talks_to_no_master_offers_no_connection_flag(verb: str, offered: set[str]) -> None:
    flags = {flag for action in _verb_parser(verb)._actions for flag in action.option_strings} - {"-h", "--help"}
    assert flags == offered
    assert all(action.help for action in _verb_parser(verb)._actions)  # every flag says what it does


@pytest.fixture(autouse=True)
def _nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flag taken and ignored would start a cluster (or write certificates): the test fails at once instead."""
    def started(args: argparse.Namespace) -> int:
        pytest.fail(f"{args.verb} ran with flags it ignores")

    monkeypatch.setattr("sparkyard.cli.commands.cmd_local", started)
    monkeypatch.setattr("sparkyard.cli.commands.cmd_certs", started)


@pytest.mark.parametrize("argv", [["local", "--master", "127.0.0.1:1"], ["local", "--tls-ca", "ca.crt"],
                                  ["certs", "d", "--config", "c.toml"]])
def test_a_connection_flag_after_such_a_verb_is_refused_in_one_line(argv: list[str],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == f"sparkyard {argv[0]}: unrecognized arguments: {' '.join(argv[-2:])} " \
                                      f"(see sparkyard {argv[0]} --help)\n"


def test_a_connection_flag_before_such_a_verb_is_refused_not_ignored(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--master", "127.0.0.1:1", "--tls-ca", "ca.crt", "local", "--workers", "1"]) == 2
    assert capsys.readouterr().err == "sparkyard local: --master, --tls-ca: not used by local (it talks to no master)\n"


def _worker(wid: str, readiness: int, ready: int, reason: str = "", alive: bool = True) -> pb.WorkerInfo:
    return pb.WorkerInfo(id=wid, slots=2, alive=alive, readiness=readiness, ready_slots=ready,
                         readiness_reason=reason)


def test_the_cluster_is_ready_when_every_worker_offers_its_slots_not_when_they_registered() -> None:
    warming = _worker("local-2", pb.READINESS_STARTING, 0, "session driver 1 warming")
    assert still_warming([_worker("local-1", pb.READINESS_READY, 2)], 2) == "1 of 2 workers registered"
    assert still_warming([_worker("local-1", pb.READINESS_READY, 2), _worker("old", pb.READINESS_READY, 2,
                                                                             alive=False)], 2) == \
        "1 of 2 workers registered"
    assert still_warming([warming, _worker("local-1", pb.READINESS_READY, 2)], 2) == \
        "local-2 STARTING: session driver 1 warming (0 of 2 slots ready)"
    assert still_warming([_worker("local-1", pb.READINESS_DEGRADED, 1, "driver 2 failed"), warming], 2) == \
        "local-1 DEGRADED: driver 2 failed (1 of 2 slots ready); local-2 STARTING: session driver 1 warming " \
        "(0 of 2 slots ready)"
    assert still_warming([_worker("local-1", pb.READINESS_READY, 2), _worker("local-2", pb.READINESS_READY, 2)],
                         2) == ""
