"""The CLI's usage errors (issue 25 item 10): one line on stderr naming the verb, exit 2, said before any
master is dialled (the address here listens nowhere)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkyard.cli import render
from sparkyard.cli.main import build_parser, main
from sparkyard.spec import SpecError, validate_cron
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = str(Path(__file__).resolve().parents[2] / "examples" / "wordcount.py") + ":main"
NOWHERE = ["--master", "127.0.0.1:1"]


@pytest.mark.parametrize("argv, line", [
    (["submit", TASKS, "--bogus"], "sparkyard submit: unrecognized arguments: --bogus (see sparkyard submit --help)"),
    (["jobs", "--state", "lost"], "sparkyard jobs: argument --state: invalid choice: 'lost' (choose from 'active', "
                                  "'paused', 'completed', 'failed', 'cancelled') (see sparkyard jobs --help)"),
    (["backfill", "J", "--from", "2026-11-01T00:00:00Z"],
     "sparkyard backfill: the following arguments are required: --to (see sparkyard backfill --help)"),
    (["submit", "--retries", "2"], "sparkyard submit: give the program to run: path/to/app.py [its arguments] "
                                   "or module:function (see sparkyard submit --help)"),
    (["submit", TASKS, "--at", "2020-01-01T00:00:00Z"],
     "sparkyard submit: --at: 2020-01-01T00:00:00.000Z is in the past; give a later time, or no --at to run it now"),
    # A job option's error names the flag typed, not the option's name in the Python client (input_globs).
    (["submit", TASKS, "--inputs", "no/such/dir/*"], "sparkyard submit: --inputs: no file matches 'no/such/dir/*'"),
    (["submit", TASKS, "--driver-memory", "lots"], "sparkyard submit: --driver-memory: 'lots' is not a size like 512m "
                                                   "or 2g (a whole number, then k, m, g, t or p)"),
    (["update", "J", "--timeout", "5x"], "sparkyard update: --timeout: '5x' is not a duration (use e.g. 500ms, 10s, "
                                         "5m, 1h30m)"),
])
def test_a_usage_error_is_one_line_naming_the_verb(argv: list[str], line: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main([*NOWHERE, *argv])
    except SystemExit as exited:  # argparse's errors exit from inside the parser
        code = exited.code  # type: ignore[assignment]
    assert code == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [line] and captured.out == ""


def test_no_master_to_reach_exits_69_not_1_which_says_the_run_failed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*NOWHERE, "wait", "j19a8c2f3a1b2c3d4e5f65.1732262400000", "--timeout", "0.5s"]) == 69
    assert main([*NOWHERE, "jobs"]) == 69
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == ["sparkyard wait", "sparkyard jobs"]
    assert all("no master listening at 127.0.0.1:1" in line for line in lines)


@pytest.mark.parametrize("expr, field", [("61 * * * *", "minute field '61' is not valid (takes 0-59"),
                                         ("0 0 24 * * *", "hour field '24' is not valid (takes 0-23"),
                                         ("* * 0 * *", "day of month field '0'"),
                                         ("* * * 13 *", "month field '13'")])
def test_a_bad_cron_names_its_field(expr: str, field: str) -> None:
    with pytest.raises(SpecError, match=field.replace("(", r"\(")):
        validate_cron(expr, "")


def test_counts_are_said_in_the_singular_when_one() -> None:
    assert render.plural(1, "task") == "1 task" and render.plural(3, "task") == "3 tasks"
    assert render.field_words(["trigger.kind", "priority"]) == "trigger, priority"


def test_late_counts_the_queueing_to_the_start_not_only_the_firing() -> None:
    import io

    from rich.console import Console

    from sparkyard.v1 import sparkyard_pb2 as pb

    run = pb.Run(id="j19a8c2f3a1b2c3d4e5f65.1732262400000", state=pb.RUN_RUNNING)
    run.scheduled_at.FromMilliseconds(1_732_262_400_000)
    run.fired_at.FromMilliseconds(1_732_262_400_005)  # fired 5 ms late, then waited 16 s for a warm driver
    run.started_at.FromMilliseconds(1_732_262_416_005)
    out = io.StringIO()
    render.runs_table(Console(file=out, width=240), [run])
    assert "│ 16.005s │" in out.getvalue(), out.getvalue()


def test_a_run_fired_ahead_of_its_time_is_not_late_until_it_is() -> None:
    """Fired 250 ms ahead (--fire-ahead) and not begun: '-'; begun at its time (claim.lua's run start of a run
    fired ahead): 0; begun 3 ms after it: 3 ms."""
    import io

    from rich.console import Console

    from sparkyard.v1 import sparkyard_pb2 as pb

    runs = []
    for started in (None, 0, 3):
        run = pb.Run(id=f"j19a8c2f3a1b2c3d4e5f65.173226240000{len(runs)}", state=pb.RUN_RUNNING)
        run.scheduled_at.FromMilliseconds(1_732_262_400_000)
        run.fired_at.FromMilliseconds(1_732_262_399_750)
        if started is not None:
            run.started_at.FromMilliseconds(1_732_262_400_000 + started)
        runs.append(run)
    out = io.StringIO()
    render.runs_table(Console(file=out, width=240), runs)
    lates = [line.split("│")[4].strip() for line in out.getvalue().splitlines() if "j19a8c2f3a1b2c3d4e5f65" in line]
    assert lates == ["-", "0ms", "3ms"], out.getvalue()


def test_a_local_cluster_of_no_workers_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """It started and said ready, a cluster that could never run a task (a new user's walk)."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["local", "--workers", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == ("sparkyard local: argument --workers: 0 is not at least 1 "
                                               "(see sparkyard local --help)")


@pytest.mark.parametrize("verb, message, said", [
    ("submit", "trigger.cron.expr: '* * *' has 3 fields", "--cron: '* * *' has 3 fields"),
    ("submit", "trigger.cron.tz: 'Mars/Base' is not a time zone", "--tz: 'Mars/Base' is not a time zone"),
    ("update", "trigger.every.interval: must be positive", "--every: must be positive"),
    ("submit", "input_globs: no file matches 'x'", "--inputs: no file matches 'x'"),
    ("submit", "entrypoint.path: not absolute", "entrypoint.path: not absolute"),  # no option of that name
    ("jobs", "limit: must not be negative", "limit: must not be negative"),  # a verb without job options
])
def test_the_master_s_field_paths_are_said_as_the_flag_typed(verb: str, message: str, said: str) -> None:
    from sparkyard.cli.commands import _as_typed

    assert _as_typed(verb, message) == said


@pytest.mark.parametrize("state, last_run, shown", [
    (pb.JOB_COMPLETED, pb.RUN_FAILED, "FAILED"), (pb.JOB_COMPLETED, pb.RUN_SUCCEEDED, "COMPLETED"),
    (pb.JOB_COMPLETED, pb.RUN_STATE_UNSPECIFIED, "COMPLETED"), (pb.JOB_ACTIVE, pb.RUN_FAILED, "ACTIVE"),
])
def test_a_completed_job_whose_last_run_failed_reads_failed_as_on_the_console(state: int, last_run: int,
                                                                              shown: str) -> None:
    assert render.job_state(pb.Job(state=state, last_run_state=last_run)) == shown
