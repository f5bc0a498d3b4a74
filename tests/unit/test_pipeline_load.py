"""sparkyard apply's definition files (common/pipeline.py ``load``): a file that is not Python is one line that
says a definition file is Python, not only the parser's complaint (``apply bad.yaml`` said "SyntaxError: '['
was never closed" and nothing else)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkyard import errors
from sparkyard.pipeline import load


def test_a_definition_that_is_not_python_is_told_that_definitions_are_python(tmp_path: Path) -> None:
    yaml = tmp_path / "pipeline.yaml"
    yaml.write_text("steps: [\n")
    with pytest.raises(errors.InvalidArgument) as raised:
        load([yaml])
    message = str(raised.value)
    assert message.startswith(f"{yaml}: SyntaxError: ") and "\n" not in message
    assert message.endswith("(a pipeline definition file is Python: `from sparkyard import Pipeline`, "
                            "docs/pipelines.md)")


def test_a_python_definition_with_a_syntax_error_gets_the_parser_s_message_alone(tmp_path: Path) -> None:
    broken = tmp_path / "pipeline.py"
    broken.write_text("p = (\n")
    with pytest.raises(errors.InvalidArgument) as raised:
        load([broken])
    assert str(raised.value).startswith(f"{broken}: SyntaxError: ")
    assert "docs/pipelines.md" not in str(raised.value)
