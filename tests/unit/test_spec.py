"""Job spec parsing, validation and defaults: every SpecError names the field at fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from sparkyard.updates import apply_update
from sparkyard.spec import (
    DEFAULT_BACKOFF_MULTIPLIER,
    DEFAULT_CATCH_UP_LIMIT,
    DEFAULT_GROUP,
    DEFAULT_INITIAL_BACKOFF_S,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_BACKOFF_S,
    MAX_PRIORITY,
    MIN_PRIORITY,
    Entrypoint,
    SplitInput,
    SpecError,
    backoff_seconds,
    normalize,
    parse_conf,
    parse_entrypoint,
    parse_input,
    resolve_entrypoint,
)
from sparkyard.v1 import sparkyard_pb2 as pb

ENTRY = "/opt/jobs/etl.py:main"
T0_MS = 1_790_000_000_000


def _spec(**fields: object) -> pb.JobSpec:
    fields.setdefault("entrypoint", ENTRY)
    return pb.JobSpec(**fields)


def _spec_error(spec: pb.JobSpec, **kwargs: bool) -> SpecError:
    with pytest.raises(SpecError) as err:
        normalize(spec, **kwargs)
    return err.value


# --------------------------------------------------------------------------------------------- entrypoints


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("job.py", Entrypoint(path="job.py")),
        ("job.py:main", Entrypoint(path="job.py", func="main")),
        ("/abs/dir/job.py:run_it", Entrypoint(path="/abs/dir/job.py", func="run_it")),
        ("jobs/nightly.py", Entrypoint(path="jobs/nightly.py")),
        ("pkg.module:main", Entrypoint(module="pkg.module", func="main")),
        ("module:_private", Entrypoint(module="module", func="_private")),
        ("  pkg.mod:f  ", Entrypoint(module="pkg.mod", func="f")),
    ],
)
def test_parse_entrypoint_reads_files_and_modules(text: str, expected: Entrypoint) -> None:
    assert parse_entrypoint(text) == expected


@pytest.mark.parametrize(
    ("entry", "text"),
    [
        (Entrypoint(path="/a/job.py"), "/a/job.py"),
        (Entrypoint(path="/a/job.py", func="main"), "/a/job.py:main"),
        (Entrypoint(module="pkg.mod", func="main"), "pkg.mod:main"),
    ],
)
def test_entrypoint_prints_as_it_is_written(entry: Entrypoint, text: str) -> None:
    assert str(entry) == text
    assert parse_entrypoint(text) == entry


def test_file_entrypoint_is_a_file_and_module_entrypoint_is_not() -> None:
    assert parse_entrypoint("job.py").is_file
    assert not parse_entrypoint("pkg.mod:main").is_file


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("job.py:", "no function name"),
        ("pkg.mod:", "no function name"),
        ("job.py:1main", "not a Python function name"),
        ("job.py:main-2", "not a Python function name"),
        ("pkg.mod", "needs a function"),
        ("pkg..mod:main", "neither a .py file nor"),
        ("my job:main", "neither a .py file nor"),
        ("1pkg.mod:main", "neither a .py file nor"),
    ],
)
def test_parse_entrypoint_refuses_malformed_text_naming_the_entrypoint(text: str, fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment) as err:
        parse_entrypoint(text)
    assert err.value.field == "entrypoint"
    assert str(err.value).startswith("entrypoint: ")


# ------------------------------------------------------------------------------------- resolve_entrypoint


@pytest.fixture
def write_job(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(relative: str, source: str) -> Path:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        return path

    return write


def test_resolve_entrypoint_makes_a_relative_file_absolute(tmp_path: Path,
                                                           write_job: Callable[[str, str], Path]) -> None:
    path = write_job("jobs/etl.py", "def main(spark, ctx):\n    return 1\n")
    assert resolve_entrypoint("jobs/etl.py:main", tmp_path) == f"{path.resolve()}:main"


def test_resolve_entrypoint_normalises_dot_segments(tmp_path: Path, write_job: Callable[[str, str], Path]) -> None:
    path = write_job("jobs/etl.py", "print('script')\n")
    assert resolve_entrypoint("./other/../jobs/etl.py", tmp_path) == str(path.resolve())


def test_resolve_entrypoint_keeps_an_absolute_file(tmp_path: Path, write_job: Callable[[str, str], Path]) -> None:
    path = write_job("etl.py", "def main(spark, ctx):\n    pass\n")
    assert resolve_entrypoint(f"{path}:main", Path("/somewhere/else")) == f"{path}:main"


def test_resolve_entrypoint_leaves_a_module_entrypoint_alone(tmp_path: Path) -> None:
    assert resolve_entrypoint("pkg.module:main", tmp_path) == "pkg.module:main"


def test_resolve_entrypoint_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="file not found: missing.py") as err:
        resolve_entrypoint("missing.py:main", tmp_path)
    assert err.value.field == "entrypoint"


def test_resolve_entrypoint_refuses_a_directory_named_like_a_file(tmp_path: Path) -> None:
    (tmp_path / "dir.py").mkdir()
    with pytest.raises(SpecError, match="file not found"):
        resolve_entrypoint("dir.py", tmp_path)


def test_resolve_entrypoint_refuses_a_missing_function(tmp_path: Path,
                                                      write_job: Callable[[str, str], Path]) -> None:
    write_job("etl.py", "def main(spark, ctx):\n    pass\n")
    with pytest.raises(SpecError, match="etl.py has no top-level function 'mian'") as err:
        resolve_entrypoint("etl.py:mian", tmp_path)
    assert err.value.field == "entrypoint"


def test_resolve_entrypoint_does_not_accept_a_nested_function(tmp_path: Path,
                                                             write_job: Callable[[str, str], Path]) -> None:
    write_job("etl.py", "class Job:\n    def main(self):\n        pass\n")
    with pytest.raises(SpecError, match="no top-level function 'main'"):
        resolve_entrypoint("etl.py:main", tmp_path)


@pytest.mark.parametrize(
    "source",
    [
        "def main(spark, ctx):\n    pass\n",
        "async def main(spark, ctx):\n    pass\n",
        "main = lambda spark, ctx: None\n",
    ],
)
def test_resolve_entrypoint_accepts_a_top_level_callable_definition(
    source: str, tmp_path: Path, write_job: Callable[[str, str], Path]
) -> None:
    path = write_job("etl.py", source)
    assert resolve_entrypoint("etl.py:main", tmp_path) == f"{path}:main"


def test_resolve_entrypoint_checks_the_function_without_running_the_file(
    tmp_path: Path, write_job: Callable[[str, str], Path]
) -> None:
    marker = tmp_path / "imported.marker"
    write_job(
        "explosive.py",
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "raise RuntimeError('must not be imported')\n"
        "def main(spark, ctx):\n    pass\n",
    )
    assert resolve_entrypoint("explosive.py:main", tmp_path).endswith("explosive.py:main")
    with pytest.raises(SpecError, match="no top-level function 'other'"):
        resolve_entrypoint("explosive.py:other", tmp_path)
    assert not marker.exists()


def test_resolve_entrypoint_reports_a_syntax_error_with_its_line(tmp_path: Path,
                                                                 write_job: Callable[[str, str], Path]) -> None:
    write_job("broken.py", "x = 1\ndef main(:\n")
    with pytest.raises(SpecError, match=r"does not parse: .*\(line 2\)") as err:
        resolve_entrypoint("broken.py:main", tmp_path)
    assert err.value.field == "entrypoint"


def test_resolve_entrypoint_does_not_parse_a_plain_script(tmp_path: Path,
                                                          write_job: Callable[[str, str], Path]) -> None:
    # A script run as __main__ has no function to look for; even one that does not parse is the worker's problem.
    path = write_job("script.py", "this is not python(\n")
    assert resolve_entrypoint("script.py", tmp_path) == str(path)


# ------------------------------------------------------------------------------------------ conf and inputs


def test_parse_conf_reads_key_value_pairs() -> None:
    assert parse_conf(["spark.executor.memory=2g", "spark.sql.shuffle.partitions=8"]) == {
        "spark.executor.memory": "2g",
        "spark.sql.shuffle.partitions": "8",
    }


def test_parse_conf_splits_at_the_first_equals_and_keeps_the_rest() -> None:
    assert parse_conf(["spark.driver.extraJavaOptions=-Da=b -Dc=d"]) == {
        "spark.driver.extraJavaOptions": "-Da=b -Dc=d"
    }


def test_parse_conf_allows_an_empty_value_and_strips_the_key() -> None:
    assert parse_conf([" spark.x =", "k=v"]) == {"spark.x": "", "k": "v"}


def test_parse_conf_later_items_win() -> None:
    assert parse_conf(["k=1", "k=2"]) == {"k": "2"}


def test_parse_conf_of_nothing_is_empty() -> None:
    assert parse_conf([]) == {}


@pytest.mark.parametrize("item", ["no-equals", "=value", "  =value", ""])
def test_parse_conf_refuses_an_item_that_is_not_key_value_naming_field_and_item(item: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_conf(["ok=1", item], field="env")
    assert err.value.field == "env"
    assert repr(item) in str(err.value)


# ---------------------------------------------------------------------------------------------- parse_input


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("part-0001.parquet", SplitInput("part-0001.parquet")),
        ("db1=orders", SplitInput("orders", "db1")),
        ("eu_west.db-2=orders=2024", SplitInput("orders=2024", "eu_west.db-2")),
        ("dt=2024-01-01", SplitInput("2024-01-01", "dt")),
        ("=dt=2024-01-01", SplitInput("dt=2024-01-01")),
        ("data/dt=2024-01-01/part-0.parquet", SplitInput("data/dt=2024-01-01/part-0.parquet")),
        ("s3://bucket/dt=2024-01-01/", SplitInput("s3://bucket/dt=2024-01-01/")),
        ("c:x=1", SplitInput("c:x=1")),
        ("9db=orders", SplitInput("9db=orders")),
        ("my db=orders", SplitInput("my db=orders")),
        ("db1=s3://bucket/key", SplitInput("s3://bucket/key", "db1")),
    ],
)
def test_parse_input_reads_value_and_optional_mark(text: str, expected: SplitInput) -> None:
    assert parse_input(text) == expected


@pytest.mark.parametrize("text", ["", "=", "db1="])
def test_parse_input_refuses_an_empty_value(text: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_input(text)
    assert err.value.field == "split.inputs"


# ------------------------------------------------------------------------------------------ normalize: defaults


def test_normalize_fills_the_documented_defaults() -> None:
    out = normalize(_spec())
    assert out.group == DEFAULT_GROUP == "default"
    assert out.name == "etl:main"
    assert out.trigger.WhichOneof("kind") == "now"
    assert out.trigger.now is True
    assert out.retry.max_attempts == DEFAULT_MAX_ATTEMPTS == 1
    assert out.retry.initial_backoff.ToMilliseconds() == DEFAULT_INITIAL_BACKOFF_S * 1000
    assert out.retry.max_backoff.ToMilliseconds() == DEFAULT_MAX_BACKOFF_S * 1000
    assert out.retry.multiplier == DEFAULT_BACKOFF_MULTIPLIER


@pytest.mark.parametrize(
    ("entrypoint", "name"),
    [
        ("/opt/jobs/etl.py:main", "etl:main"),
        ("/opt/jobs/etl.py", "etl"),
        ("company.jobs.nightly:run", "nightly:run"),
        ("nightly:run", "nightly:run"),
    ],
)
def test_normalize_names_an_unnamed_job_after_its_entrypoint(entrypoint: str, name: str) -> None:
    assert normalize(_spec(entrypoint=entrypoint)).name == name


def test_normalize_keeps_given_values() -> None:
    spec = _spec(name="nightly", group="etl", priority=5,
                 retry=pb.RetryPolicy(max_attempts=3, multiplier=1.5))
    spec.retry.initial_backoff.FromSeconds(1)
    spec.retry.max_backoff.FromSeconds(30)
    out = normalize(spec)
    assert (out.name, out.group, out.priority) == ("nightly", "etl", 5)
    assert out.retry.max_attempts == 3
    assert out.retry.multiplier == 1.5
    assert out.retry.initial_backoff.ToSeconds() == 1
    assert out.retry.max_backoff.ToSeconds() == 30


def test_normalize_returns_a_copy_and_leaves_the_input_untouched() -> None:
    spec = _spec()
    before = spec.SerializeToString()
    out = normalize(spec)
    assert out is not spec
    assert spec.SerializeToString() == before


def test_normalize_strips_blanks_around_the_entrypoint() -> None:
    assert normalize(_spec(entrypoint="  /opt/jobs/etl.py:main ")).entrypoint == "/opt/jobs/etl.py:main"


def test_normalize_gives_catch_up_its_default_limit() -> None:
    out = normalize(_spec(misfire=pb.MISFIRE_CATCH_UP, trigger=pb.Trigger(cron=pb.Trigger.Cron(expr="* * * * *"))))
    assert out.misfire_catch_up_limit == DEFAULT_CATCH_UP_LIMIT


@pytest.mark.parametrize("priority", [MIN_PRIORITY, 0, MAX_PRIORITY])
def test_normalize_accepts_priorities_at_the_bounds(priority: int) -> None:
    assert normalize(_spec(priority=priority)).priority == priority


def test_normalize_accepts_a_relative_path_when_not_required_absolute() -> None:
    out = normalize(_spec(entrypoint="jobs/etl.py:main"), require_absolute_path=False)
    assert out.entrypoint == "jobs/etl.py:main"


@pytest.mark.parametrize("expr", ["*/5 * * * *", "0 30 2 * * *", "0 0 * * MON-FRI"])
def test_normalize_accepts_five_and_six_field_cron(expr: str) -> None:
    trigger = pb.Trigger(cron=pb.Trigger.Cron(expr=expr, tz="Europe/Berlin"))
    assert normalize(_spec(trigger=trigger)).trigger.cron.expr == expr


def test_normalize_accepts_a_bounded_recurring_trigger() -> None:
    trigger = pb.Trigger(every=pb.Trigger.Every(), max_runs=3)
    trigger.every.interval.FromMilliseconds(100)
    trigger.start_at.FromMilliseconds(T0_MS)
    trigger.end_at.FromMilliseconds(T0_MS + 1)
    assert normalize(_spec(trigger=trigger)).trigger.max_runs == 3


# ---------------------------------------------------------------------------------------- normalize: errors


def _every(ms: int) -> pb.Trigger:
    trigger = pb.Trigger(every=pb.Trigger.Every())
    trigger.every.interval.FromMilliseconds(ms)
    return trigger


def _cron(expr: str, tz: str = "") -> pb.Trigger:
    return pb.Trigger(cron=pb.Trigger.Cron(expr=expr, tz=tz))


def _with_times(trigger: pb.Trigger, *, start_ms: int | None = None, end_ms: int | None = None) -> pb.Trigger:
    if start_ms is not None:
        trigger.start_at.FromMilliseconds(start_ms)
    if end_ms is not None:
        trigger.end_at.FromMilliseconds(end_ms)
    return trigger


def _negative_timeout() -> pb.JobSpec:
    spec = _spec()
    spec.timeout.FromSeconds(-1)
    return spec


def _negative_delay() -> pb.JobSpec:
    trigger = pb.Trigger()
    trigger.delay.FromSeconds(-5)
    return _spec(trigger=trigger)


def _at() -> pb.Trigger:
    trigger = pb.Trigger()
    trigger.at.FromMilliseconds(T0_MS)
    return trigger


def _delay() -> pb.Trigger:
    trigger = pb.Trigger()
    trigger.delay.FromSeconds(60)
    return trigger


def _retry(**fields: object) -> pb.RetryPolicy:
    return pb.RetryPolicy(**fields)


def _negative_backoff() -> pb.JobSpec:
    retry = _retry(max_attempts=2)
    retry.initial_backoff.FromSeconds(-1)
    return _spec(retry=retry)


INVALID: dict[str, tuple[Callable[[], pb.JobSpec], str]] = {
    # case id → (spec, field named by the SpecError)
    "priority below -1000": (lambda: _spec(priority=MIN_PRIORITY - 1), "priority"),
    "priority above 1000": (lambda: _spec(priority=MAX_PRIORITY + 1), "priority"),
    "group with a space": (lambda: _spec(group="my group"), "group"),
    "group with a colon": (lambda: _spec(group="a:b"), "group"),
    "group too long": (lambda: _spec(group="g" * 65), "group"),
    "name too long": (lambda: _spec(name="n" * 201), "name"),
    "env name starting with a digit": (lambda: _spec(env={"1X": "v"}), "env"),
    "env name with a dash": (lambda: _spec(env={"MY-VAR": "v"}), "env"),
    "blank conf key": (lambda: _spec(conf={" ": "v"}), "conf"),
    "negative timeout": (_negative_timeout, "timeout"),
    "consistent hash without key": (lambda: _spec(routing=pb.ROUTING_CONSISTENT_HASH), "routing_key"),
    "negative catch-up limit": (lambda: _spec(misfire_catch_up_limit=-1), "misfire_catch_up_limit"),
    "catch-up limit above 1000": (lambda: _spec(misfire_catch_up_limit=1001), "misfire_catch_up_limit"),
    "negative max_concurrent": (lambda: _spec(split=pb.SplitSpec(max_concurrent=-1)), "split.max_concurrent"),
    "negative delay": (_negative_delay, "trigger.delay"),
    "cron minute 61": (lambda: _spec(trigger=_cron("61 * * * *")), "trigger.cron.expr"),
    "cron hour 24": (lambda: _spec(trigger=_cron("0 24 * * *")), "trigger.cron.expr"),
    "cron seconds 60": (lambda: _spec(trigger=_cron("60 0 * * * *")), "trigger.cron.expr"),
    "cron with 4 fields": (lambda: _spec(trigger=_cron("* * * *")), "trigger.cron.expr"),
    "cron with 7 fields": (lambda: _spec(trigger=_cron("0 0 0 * * * 2026")), "trigger.cron.expr"),
    "cron empty": (lambda: _spec(trigger=_cron("")), "trigger.cron.expr"),
    "cron gibberish": (lambda: _spec(trigger=_cron("a b c d e")), "trigger.cron.expr"),
    "unknown time zone": (lambda: _spec(trigger=_cron("0 * * * *", "Mars/Olympus")), "trigger.cron.tz"),
    "every below minimum": (lambda: _spec(trigger=_every(99)), "trigger.every.interval"),
    "every zero": (lambda: _spec(trigger=_every(0)), "trigger.every.interval"),
    "max_runs negative": (lambda: _spec(trigger=pb.Trigger(cron=pb.Trigger.Cron(expr="* * * * *"), max_runs=-1)),
                          "trigger.max_runs"),
    "max_runs on now": (lambda: _spec(trigger=pb.Trigger(now=True, max_runs=2)), "trigger"),
    "max_runs on at": (lambda: _spec(trigger=pb.Trigger(at=_at().at, max_runs=2)), "trigger"),
    "end_at on delay": (lambda: _spec(trigger=_with_times(_delay(), end_ms=T0_MS)), "trigger"),
    "start_at on at": (lambda: _spec(trigger=_with_times(_at(), start_ms=T0_MS)), "trigger"),
    "start_at on unset trigger": (lambda: _spec(trigger=_with_times(pb.Trigger(), start_ms=T0_MS)), "trigger"),
    "end_at before start_at": (lambda: _spec(trigger=_with_times(_every(1000), start_ms=T0_MS, end_ms=T0_MS - 1)),
                               "trigger.end_at"),
    "end_at equal to start_at": (lambda: _spec(trigger=_with_times(_every(1000), start_ms=T0_MS, end_ms=T0_MS)),
                                 "trigger.end_at"),
    "retry multiplier below 1": (lambda: _spec(retry=_retry(multiplier=0.5)), "retry.multiplier"),
    "retry multiplier negative": (lambda: _spec(retry=_retry(multiplier=-2)), "retry.multiplier"),
    "retry max_attempts negative": (lambda: _spec(retry=_retry(max_attempts=-1)), "retry.max_attempts"),
    "retry max_attempts above 100": (lambda: _spec(retry=_retry(max_attempts=101)), "retry.max_attempts"),
    "retry negative backoff": (_negative_backoff, "retry.initial_backoff"),
    "relative path": (lambda: _spec(entrypoint="jobs/etl.py:main"), "entrypoint"),
    "relative path without function": (lambda: _spec(entrypoint="etl.py"), "entrypoint"),
    "empty entrypoint": (lambda: _spec(entrypoint=""), "entrypoint"),
}


@pytest.mark.parametrize(("make", "field"), list(INVALID.values()), ids=list(INVALID))
def test_normalize_refuses_an_invalid_spec_naming_the_field(make: Callable[[], pb.JobSpec], field: str) -> None:
    error = _spec_error(make())
    assert error.field == field
    assert str(error).startswith(f"{field}: ")


def test_spec_error_is_a_value_error() -> None:
    assert isinstance(_spec_error(_spec(priority=5000)), ValueError)


def test_relative_path_error_says_the_path_must_be_absolute() -> None:
    assert "must be an absolute path" in str(_spec_error(_spec(entrypoint="jobs/etl.py:main")))


def test_every_below_minimum_error_states_the_minimum() -> None:
    assert "below the minimum 0.1s" in str(_spec_error(_spec(trigger=_every(50))))


def test_cron_field_count_error_states_the_count() -> None:
    assert "has 4 fields" in str(_spec_error(_spec(trigger=_cron("* * * *"))))


# ---------------------------------------------------------------------------------------------------- backoff


def _policy(initial_s: float, multiplier: float, max_s: float) -> pb.RetryPolicy:
    retry = pb.RetryPolicy(max_attempts=10, multiplier=multiplier)
    retry.initial_backoff.FromMilliseconds(int(initial_s * 1000))
    retry.max_backoff.FromMilliseconds(int(max_s * 1000))
    return retry


@pytest.mark.parametrize(("failed_attempt", "delay"), [(1, 5.0), (2, 10.0), (3, 20.0), (4, 40.0), (5, 80.0)])
def test_backoff_grows_by_the_multiplier_per_attempt(failed_attempt: int, delay: float) -> None:
    assert backoff_seconds(_policy(5, 2, 600), failed_attempt) == delay


@pytest.mark.parametrize("failed_attempt", [8, 9, 50])
def test_backoff_is_capped_at_max_backoff(failed_attempt: int) -> None:
    assert backoff_seconds(_policy(5, 2, 600), failed_attempt) == 600.0


def test_backoff_with_multiplier_one_is_constant() -> None:
    assert [backoff_seconds(_policy(3, 1, 600), n) for n in range(1, 6)] == [3.0] * 5


def test_backoff_before_any_attempt_is_the_initial_backoff() -> None:
    assert backoff_seconds(_policy(5, 2, 600), 0) == 5.0


def test_backoff_of_a_normalized_default_policy_starts_at_five_seconds_and_doubles() -> None:
    retry = normalize(_spec()).retry
    assert [backoff_seconds(retry, n) for n in (1, 2, 3)] == [5.0, 10.0, 20.0]


def test_backoff_never_exceeds_the_cap_even_when_initial_is_larger() -> None:
    assert backoff_seconds(_policy(30, 2, 10), 1) == 10.0


def test_an_update_takes_only_the_listed_fields_and_a_new_trigger_kind_replaces_the_old() -> None:
    current = normalize(_spec(args=["a"], priority=4, trigger=pb.Trigger(every=pb.Trigger.Every(interval={"seconds": 60}),
                                                                        max_runs=5)))
    change = pb.JobSpec(args=["b"], priority=9, trigger=pb.Trigger(cron=pb.Trigger.Cron(expr="0 3 * * *")))
    merged = apply_update(current, change, ["args", "trigger.kind"])
    assert list(merged.args) == ["b"] and merged.priority == 4
    assert merged.trigger.WhichOneof("kind") == "cron" and merged.trigger.max_runs == 5
    assert list(current.args) == ["a"]  # the current spec is not changed


@pytest.mark.parametrize("fields, named", [(["entrypoint"], "cannot change entrypoint"), ([], "at least one")])
def test_an_update_refuses_fields_it_cannot_change(fields: list[str], named: str) -> None:
    with pytest.raises(SpecError, match=named):
        apply_update(normalize(_spec()), pb.JobSpec(), fields)


@pytest.mark.parametrize("setter", [
    lambda s: s.timeout.FromSeconds(11 * 365 * 24 * 3600),
    lambda s: s.trigger.delay.FromSeconds(11 * 365 * 24 * 3600),
    lambda s: s.trigger.every.interval.FromSeconds(11 * 365 * 24 * 3600),
    lambda s: s.retry.max_backoff.FromSeconds(11 * 365 * 24 * 3600),
])
def test_a_duration_over_ten_years_is_refused(setter: Any) -> None:
    spec = pb.JobSpec(entrypoint="m:f")
    setter(spec)
    with pytest.raises(SpecError, match="longer than the maximum"):
        normalize(spec)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e6])
def test_a_backoff_multiplier_that_is_not_finite_or_too_large_is_refused(value: float) -> None:
    with pytest.raises(SpecError) as err:
        normalize(pb.JobSpec(entrypoint="m:f", retry=pb.RetryPolicy(multiplier=value)))
    assert err.value.field == "retry.multiplier"


def test_an_unknown_enum_value_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecError) as err:
        normalize(pb.JobSpec(entrypoint="m:f", misfire=99))  # type: ignore[arg-type]
    assert err.value.field == "misfire"


def test_a_time_before_1970_is_refused() -> None:
    spec = pb.JobSpec(entrypoint="m:f")
    spec.trigger.at.FromSeconds(-5)
    with pytest.raises(SpecError) as err:
        normalize(spec)
    assert err.value.field == "trigger.at"


def test_a_huge_bad_value_is_quoted_cut_to_a_few_hundred_characters() -> None:
    with pytest.raises(SpecError) as err:
        normalize(pb.JobSpec(entrypoint="m:f", group="x" * 100_000))
    assert len(str(err.value)) < 400 and "100,000 characters" in str(err.value)


@pytest.mark.parametrize("field", ["py_files", "files"])
def test_shipped_paths_must_stay_inside_the_bundle(field: str) -> None:
    spec = _spec(entrypoint="job.py", bundle=pb.BundleRef(digest="a" * 64, size=1), **{field: ["../etc/passwd"]})
    err = _spec_error(spec)
    assert err.field == field and "inside the bundle" in str(err)
