"""`sparkyard submit` reads a spark-submit command line: the application's arguments after it, unchanged."""

from __future__ import annotations

import os
import pathlib

import pytest

from sparkyard.cli.main import build_parser


def test_everything_after_a_script_is_the_applications_unchanged_and_sparkyard_s_own_options_there_are_noted(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["submit", "--name", "etl", "--conf", "a=b", "etl.py", "--date", "2026-11-01",
                                      "--name", "x", "data/sales.csv", "--wait", "--retries=2"])
    assert args.entrypoint == "etl.py" and args.name == "etl" and not args.wait
    assert args.args == ["--date", "2026-11-01", "--name", "x", "data/sales.csv", "--wait", "--retries=2"]
    # --name is spark-submit's own too (the script's argument under spark-submit as well): not noted.
    assert capsys.readouterr().err.splitlines() == [
        "sparkyard: note: --wait --retries=2 after etl.py are the program's arguments, as under spark-submit; "
        "Sparkyard's own options go before the script"]
    build_parser().parse_args(["submit", "etl.py", "--date", "2026-11-01"])
    assert capsys.readouterr().err == ""


def test_after_a_function_entrypoint_options_are_sparkyards() -> None:
    args = build_parser().parse_args(["submit", "etl.py:main", "--retries", "2", "--wait", "--arg", "z"])
    assert args.retries == "2" and args.wait and args.args == ["z"]


def test_spark_submits_own_options_become_the_conf_it_would_set() -> None:
    args = build_parser().parse_args(["submit", "--jars", "lib/a.jar,/opt/b.jar", "--packages", "g:a:1",
                                      "--total-executor-cores", "4", "--archives", "env.tgz", "--deploy-mode",
                                      "client", "app.py"])
    assert args.conf == [f"spark.jars={os.path.abspath('lib/a.jar')},/opt/b.jar", "spark.jars.packages=g:a:1",
                         f"spark.archives={os.path.abspath('env.tgz')}", "spark.cores.max=4"]


@pytest.mark.parametrize("master", ["yarn", "local[*]", "spark://h:7077", "k8s://https://h"])
def test_a_spark_master_is_refused_with_the_reason(master: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["submit", "--master", master, "app.py"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--master {master} is a Spark master" in err and "--spark-master" in err


def test_spark_submits_driver_and_repository_options_become_their_conf_the_last_single_value_counting(
) -> None:
    args = build_parser().parse_args([
        "submit", "--driver-java-options", "-Da=1", "--driver-java-options", "-Dx=1,2 -Dy=3",
        "--driver-class-path", f"lib/a.jar{os.pathsep}/opt/b.jar", "--driver-library-path", "native",
        "--repositories", "https://r1", "--repositories", "https://r2", "--exclude-packages", "g:x",
        "--driver-cores", "2", "--queue", "etl", "--principal", "me@REALM", "--keytab", "me.keytab", "app.py"])
    assert args.conf == [
        "spark.jars.excludes=g:x", "spark.jars.repositories=https://r1,https://r2", "spark.driver.cores=2",
        "spark.driver.extraJavaOptions=-Dx=1,2 -Dy=3",
        f"spark.driver.extraClassPath={os.path.abspath('lib/a.jar')}{os.pathsep}/opt/b.jar",
        f"spark.driver.extraLibraryPath={os.path.abspath('native')}", "spark.yarn.queue=etl",
        "spark.kerberos.principal=me@REALM", f"spark.kerberos.keytab={os.path.abspath('me.keytab')}"]


def test_a_properties_file_gives_its_spark_keys_under_the_jobs_own_conf(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "job.conf"
    props.write_text("# defaults\n! also a comment\nspark.executor.memory   2g\nspark.sql.shuffle.partitions=16\n"
                     "spark.app.name : etl \nmyapp.date 2026\n\n", encoding="utf-8")
    args = build_parser().parse_args(["submit", "--properties-file", str(props), "--conf",
                                      "spark.sql.shuffle.partitions=64", "--verbose", "app.py", "--verbose"])
    assert args.conf == ["spark.executor.memory=2g", "spark.sql.shuffle.partitions=16", "spark.app.name=etl",
                         "spark.sql.shuffle.partitions=64"]  # the later --conf wins, as under spark-submit
    assert args.args == ["--verbose"]  # after the script: the program's, as spark-submit's own options are
    err = capsys.readouterr().err.splitlines()
    assert err == [f"sparkyard: warning: --properties-file {props}: ignoring myapp.date: not Spark conf (spark.*), "
                   "as spark-submit ignores it",
                   "sparkyard: Spark conf of the job: spark.executor.memory=2g, spark.sql.shuffle.partitions=16, "
                   "spark.app.name=etl, spark.sql.shuffle.partitions=64"]


def test_a_missing_properties_file_is_one_line(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["submit", "--properties-file", str(tmp_path / "nope.conf"), "app.py"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"sparkyard submit: --properties-file {tmp_path / 'nope.conf'}: No such file or directory "
        "(see sparkyard submit --help)"]


@pytest.mark.parametrize("line, why", [
    (["--class", "org.Main"], "--class is spark-submit's option that runs a JVM application's main class"),
    (["--proxy-user", "bob"], "--proxy-user is spark-submit's option that would run the job as another user"),
    (["--kill", "driver-1"], "sparkyard cancel RUN"), (["--status", "driver-1"], "sparkyard run RUN"),
    (["--version"], "a job runs on its workers' own Spark")])
def test_spark_submits_options_without_meaning_here_are_refused_with_why(
        line: list[str], why: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["submit", *line, "app.py"])
    assert exit_.value.code == 2
    assert why in capsys.readouterr().err.strip().splitlines()[-1]


def test_supervise_is_accepted_without_effect_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["submit", "--supervise", "app.py"])
    assert args.entrypoint == "app.py" and args.conf is None
    assert capsys.readouterr().err.splitlines() == [
        "sparkyard: warning: --supervise has no effect: a failed task is re-run when the job has --retries"]


def test_jvm_options_that_start_with_a_dash_are_read_as_spark_submit_reads_them_and_the_programs_are_untouched(
        ) -> None:
    args = build_parser().parse_args(["--json", "submit", "--name", "etl", "--driver-java-options", "-Dk=v",
                                      "app.py", "--driver-java-options", "-Dp=q"])
    assert args.conf == ["spark.driver.extraJavaOptions=-Dk=v"]
    assert args.args == ["--driver-java-options", "-Dp=q"]
