"""Job options defined once (common/options.py): the CLI's flags and the Python client's keyword arguments
come from the same fields and make the same spec; bad values are refused naming the option."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from sparkyard import errors
from sparkyard.cli.main import build_parser
from sparkyard.option_values import read as read_value
from sparkyard import options
from sparkyard.options import JobOptions, build_spec, build_specs
from sparkyard.errors import InvalidArgument
from sparkyard.spec import normalize
from sparkyard.v1 import sparkyard_pb2 as pb


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "job.py").write_text("def main(spark, ctx):\n    return 1\n")
    for name in ("a.csv", "b.csv"):
        (tmp_path / "data").mkdir(exist_ok=True)
        (tmp_path / "data" / name).write_text("x\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cli_spec(*argv: str) -> pb.JobSpec:
    args = build_parser().parse_args(["submit", "job.py:main", *argv])
    return JobOptions.from_namespace(args).to_spec(args.entrypoint)[0]


def test_every_option_has_exactly_one_flag_and_help() -> None:
    parser = argparse.ArgumentParser()
    JobOptions.add_arguments(parser)
    dests = [a.dest for a in parser._actions if a.dest != "help"]
    cli_fields = [f.name for f in dataclasses.fields(JobOptions) if f.metadata["option"].cli]
    assert sorted(dests) == sorted(cli_fields) and len(dests) == len(set(dests))
    assert all(a.help for a in parser._actions)


def test_the_cli_and_the_python_client_make_the_same_spec(project: Path) -> None:
    argv = ["--arg", "2026-11-22", "--arg", "x", "--name", "etl", "--priority", "5", "--runner", "submit",
            "--conf", "spark.sql.shuffle.partitions=4", "--env", "MODE=prod", "--retries", "2", "--backoff", "30s",
            "--max-backoff", "5m", "--timeout", "1h30m", "--every", "10m", "--fixed-delay", "--max-runs", "3",
            "--misfire", "catch-up", "--catch-up-limit", "4", "--overlap", "forbid", "--input", "day=2026-11-22",
            "--input", "s3://b/dt=1/", "--parallelism", "2", "--max-concurrent", "1", "--routing", "consistent-hash",
            "--routing-key", "k", "--label", "team=data", "--task-memory", "2g", "--no-ship"]
    python = build_spec("job.py:main", args=["2026-11-22", "x"], name="etl", priority=5, runner="submit",
                        conf={"spark.sql.shuffle.partitions": "4"}, env=["MODE=prod"], retries=2, backoff=30,
                        max_backoff="5m", timeout=5400, every="10m", fixed_delay=True, max_runs=3, misfire="catch-up",
                        catch_up_limit=4, overlap="forbid", inputs=[("2026-11-22", "day"), "s3://b/dt=1/"],
                        parallelism=2, max_concurrent=1, routing="consistent-hash", routing_key="k",
                        labels={"team": "data"}, task_memory=2048, ship=False)
    assert cli_spec(*argv) == python
    norm = normalize(python)
    assert norm.retry.max_attempts == 3 and norm.timeout.ToSeconds() == 5400
    assert norm.trigger.every.interval.ToSeconds() == 600 and norm.task_memory_mb == 2048
    assert [(i.value, i.mark) for i in norm.split.inputs] == [("2026-11-22", "day"), ("s3://b/dt=1/", "")]


def test_an_input_glob_names_every_matching_file(project: Path) -> None:
    spec = cli_spec("--inputs", "data/*.csv", "--no-ship")
    assert [i.value for i in spec.split.inputs] == [str(project / "data" / "a.csv"), str(project / "data" / "b.csv")]
    with pytest.raises(errors.InvalidArgument, match="input_globs: no file matches"):
        cli_spec("--inputs", "nothing/*.csv")


def test_an_input_globs_files_are_named_with_their_symlinks_resolved(project: Path) -> None:
    real = project / "real"
    (real / "sub").mkdir(parents=True)
    (real / "sub" / "x.csv").write_text("1\n")
    (real / "y.csv").write_text("2\n")
    (project / "linked").symlink_to(real)  # a folder that is a link
    (real / "sub" / "z.csv").symlink_to(real / "y.csv")  # a file that is a link
    spec = cli_spec("--inputs", "linked/**/*.csv", "--no-ship")
    assert [i.value for i in spec.split.inputs] == [str((project / "linked" / m).resolve()) for m in
                                                    ("sub/x.csv", "sub/z.csv", "y.csv")]
    assert [i.value for i in spec.split.inputs] == [str(real / "sub" / "x.csv"), str(real / "y.csv"), str(real / "y.csv")]


@pytest.mark.parametrize("options, message", [
    ({"retires": 2}, "unknown job option.*retires"),
    ({"retries": -1}, "retries: must not be negative"),
    ({"retries": "two"}, "retries: 'two' is not a whole number"),
    ({"timeout": "10 parsecs"}, "timeout: .* is not a duration"),
    ({"at": "2026-11-22 03:00"}, "at: .* has no time zone offset"),
    ({"misfire": "sometimes"}, "misfire: 'sometimes' is not one of skip, fire-once, catch-up"),
    ({"labels": ["team"]}, "labels: 'team' is not key=value"),
    ({"task_memory": "lots"}, "task_memory: 'lots' is not a size"),
    ({"delay": "10s", "cron": "* * * * *"}, "trigger: choose one of"),
    ({"tz": "Europe/Berlin"}, "tz: --tz applies to --cron"),
    ({"fixed_delay": True}, "fixed_delay: --fixed-delay applies to --every"),
    ({"cwd": "relative/dir"}, "cwd: 'relative/dir' must be an absolute path"),
    ({"files": ["data/a.csv"], "ship": False}, "--no-ship turns off"),
    ({"args": "one-string"}, "args: 'one-string': give a list"),
])
def test_a_bad_option_is_refused_naming_it(project: Path, options: dict[str, object], message: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=message):
        build_spec("job.py:main", **options)


def test_a_bad_flag_value_on_the_command_line_is_refused_naming_it(project: Path) -> None:
    with pytest.raises(errors.InvalidArgument, match="label: 'team' is not key=value|labels: 'team'"):
        cli_spec("--label", "team")
    with pytest.raises(errors.InvalidArgument, match="retries: '1.5' is not a whole number"):
        cli_spec("--retries", "1.5")
    with pytest.raises(SystemExit):  # argparse: two triggers at once
        cli_spec("--delay", "1s", "--every", "1s")


def test_build_specs_makes_what_build_spec_makes_packing_the_code_once(project: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Many jobs of one entrypoint: the same specs as one build_spec each, the code packed once per set of
    files (a job with files of its own is packed for them), and a bad option named."""
    (project / "util.py").write_text("X = 1\n")
    jobs = [{"name": "a", "cron": "0 1 * * *"}, {"name": "b", "every": "10m", "retries": 2},
            {"name": "c", "py_files": ["util.py"]}, {"name": "d", "cron": "0 2 * * *"}]
    one_by_one = [build_spec("job.py:main", **{"group": "etl", **job}) for job in jobs]
    packed: list[object] = []
    real = options.build_bundle
    monkeypatch.setattr(options, "build_bundle", lambda *a, **kw: packed.append(a) or real(*a, **kw))
    assert build_specs("job.py:main", jobs, group="etl") == one_by_one
    assert len(packed) == 2 and list(one_by_one[2].py_files) == ["util.py"] and not one_by_one[0].py_files
    with pytest.raises(InvalidArgument, match="priority"):
        build_specs("job.py:main", [{"name": "a"}, {"name": "b", "priority": "high"}])


def test_every_default_is_in_the_form_its_option_reads_to() -> None:
    """JobOptions skips reading a value that is its default: that holds only if reading it changes nothing."""
    for f in dataclasses.fields(JobOptions):
        if f.default is not dataclasses.MISSING:
            read = read_value(f.metadata["option"].kind, f.name, f.default)
            assert read == f.default and type(read) is type(f.default), f.name


def test_defaults_make_a_job_that_runs_now_once(project: Path) -> None:
    spec = normalize(build_spec("job.py:main"))
    assert spec.trigger.now and spec.retry.max_attempts == 1 and spec.name == "job:main"
    assert spec.bundle.digest  # the entrypoint is shipped


def test_every_option_changes_spec_fields_an_update_may_change() -> None:
    from sparkyard.updates import UPDATABLE

    for f in dataclasses.fields(JobOptions):
        option = f.metadata["option"]
        fields = option.spec if option.spec is not None else (f.name,)
        assert set(fields) <= UPDATABLE, f.name


def test_an_update_names_only_the_fields_of_the_options_given() -> None:
    spec, fields, packed = JobOptions.of({"retries": 2, "cron": "0 3 * * *", "tz": "Europe/Berlin"}).to_update(
        ["retries", "cron", "tz"])
    assert fields == ["retry.max_attempts", "trigger.kind"] and packed is None
    assert spec.retry.max_attempts == 3 and spec.trigger.cron.tz == "Europe/Berlin" and spec.entrypoint == ""


def test_shipped_code_changes_only_with_its_entrypoint_given_again() -> None:
    with pytest.raises(InvalidArgument, match="entrypoint"):
        JobOptions.of({"py_files": ["lib.py"]}).to_update(["py_files"])
    with pytest.raises(InvalidArgument, match="fields"):
        JobOptions.of({}).to_update([])


def test_after_names_the_parent_and_its_condition_succeeded_by_default(project: Path) -> None:
    parent = "j19a8c2f3a1b2c3d4e5f65"
    assert cli_spec("--after", parent).trigger.after == pb.Trigger.After(job_id=parent, when=pb.AFTER_SUCCEEDED)
    for word, when in (("succeeded", pb.AFTER_SUCCEEDED), ("failed", pb.AFTER_FAILED), ("always", pb.AFTER_ALWAYS)):
        assert cli_spec("--after", f"{parent}:{word}").trigger.after.when == when


@pytest.mark.parametrize(("after", "fragment"), [
    ("j19a8c2f3a1b2c3d4e5f65:sometimes", "'sometimes' is not one of succeeded, failed, always"),
    (":failed", "name the parent job"),
])
def test_a_bad_after_is_refused_naming_the_option(after: str, fragment: str) -> None:
    with pytest.raises(InvalidArgument, match=f"after: .*{fragment}"):
        JobOptions(after=after)


def test_after_is_one_trigger_among_the_others() -> None:
    with pytest.raises(InvalidArgument, match="choose one of .*--after"):
        JobOptions(after="j19a8c2f3a1b2c3d4e5f65", every=10)


def test_a_child_job_s_parent_must_be_a_job_id() -> None:
    with pytest.raises(Exception, match=r"trigger.after.job_id: 'nightly' is not a job id"):
        normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", trigger=pb.Trigger(after=pb.Trigger.After(job_id="nightly"))))
    with pytest.raises(Exception, match=r"start_at, end_at and max_runs apply only"):
        normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", trigger=pb.Trigger(
            after=pb.Trigger.After(job_id="j19a8c2f3a1b2c3d4e5f65"), max_runs=3)))


def test_files_are_shipped_and_named_in_the_spec_relative_to_the_bundle(project: Path) -> None:
    spec = cli_spec("--files", "data/a.csv,data/b.csv", "--py-files", "job.py")
    assert list(spec.files) == ["data/a.csv", "data/b.csv"] and list(spec.py_files) == ["job.py"]
    assert spec.bundle.digest


def test_a_verb_s_flag_is_never_read_as_an_abbreviation_of_another() -> None:
    """`--to` is backfill's own flag, not an ambiguous `--token`/`--token-file` (the README's backfill line)."""
    args = build_parser().parse_args(["backfill", "j1", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z"])
    assert (args.start, args.end) == ("2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["jobs", "--tok", "x"])  # no abbreviations at all


@pytest.mark.parametrize("flag,first,second", [("--after", "p1", "p2"), ("--name", "a", "b"), ("--every", "1s", "2s")])
def test_a_one_value_flag_given_twice_is_refused_naming_both(flag: str, first: str, second: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["submit", flag, first, flag, second, "x.py"])
    assert exit_.value.code == 2
    assert f"{flag} given twice ('{first}' and '{second}')" in capsys.readouterr().err
