"""A script's sibling modules go with it, as spark-submit finds them on sys.path beside the script."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from sparkyard import bundle


def _names(packed: bundle.Bundle) -> list[str]:
    return sorted(zipfile.ZipFile(io.BytesIO(packed.data)).namelist())


def test_modules_and_packages_beside_a_script_travel_with_it_minus_ignored(tmp_path: Path) -> None:
    (tmp_path / "jobs" / "helpers" / "deep").mkdir(parents=True)
    (tmp_path / "jobs" / "notes").mkdir()
    for name in ("jobs/etl.py", "jobs/util.py", "jobs/secret.py", "jobs/helpers/__init__.py", "jobs/helpers/x.py",
                 "jobs/helpers/deep/y.py", "jobs/helpers/skip.py", "jobs/notes/z.py", "jobs/data.csv", "top.py"):
        (tmp_path / name).write_text("x = 1\n")
    (tmp_path / "jobs" / ".sparkyardignore").write_text("secret.py\nhelpers/skip.py\n")
    packed = bundle.build(tmp_path / "jobs" / "etl.py", "", submit_dir=tmp_path)
    # deep/ has no __init__.py: not a package of helpers; notes/ is no package; data is not a module.
    assert _names(packed) == ["jobs/etl.py", "jobs/helpers/__init__.py", "jobs/helpers/x.py", "jobs/util.py"]
    assert packed.entrypoint == "jobs/etl.py"


def test_siblings_go_beside_a_script_from_outside_the_submit_directory(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "here").mkdir()
    (tmp_path / "lib" / "etl.py").write_text("import util\n")
    (tmp_path / "lib" / "util.py").write_text("x = 1\n")
    assert _names(bundle.build(tmp_path / "lib" / "etl.py", "", submit_dir=tmp_path / "here")) == ["etl.py", "util.py"]


def test_siblings_heavier_than_the_limit_stay_behind_and_the_user_is_told_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "etl.py").write_text("import util\n")
    (tmp_path / "util.py").write_text("x = 1\n" * 100)
    (tmp_path / "small.py").write_text("y = 2\n")
    monkeypatch.setattr(bundle, "SIBLINGS_MAX_BYTES", 2**20 // 8)
    (tmp_path / "big.py").write_text("# " + "x" * (2**20 // 5) + "\n")
    for _ in range(2):  # a bulk submit builds it again: said once
        assert _names(bundle.build(tmp_path / "etl.py", "", submit_dir=tmp_path)) == ["etl.py"]
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith("the Python modules beside etl.py are not shipped with it: they weigh 0.2 MiB, over 0.125 MiB "
                           "(the largest: big.py); ship what it imports with --py-files, or --bundle DIR with a "
                           ".sparkyardignore"), said
