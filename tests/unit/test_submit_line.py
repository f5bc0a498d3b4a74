"""`sparkyard submit` reads a spark-submit command line: the application's arguments after it, unchanged."""

from __future__ import annotations

import os

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
