"""The command lines of README.md and docs/*.md, as tests/integration/test_documented_commands.py runs them:
extracted from the code blocks (continuation lines joined, the block's ``export`` lines kept as the line's
set-up), and expanded into the commands one line stands for."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A command of ours at the start of a line of a code block: the CLI, a daemon, or the CLI by its path.
# (A diagram's "sparkyard CLI" or an error's "sparkyard: …" is none: a verb or an option follows, or nothing.)
COMMAND = re.compile(r"^(?:\$ )?(?:\S*/)?(?:\$S|sparkyard(?:-master|-worker)?)(?=\s+[a-z./$-]|$)")

# Where the docs name a host's paths, the test's stand-ins (the CLI by its path is this checkout's).
# /etc/sparkyard (docs/security.md's configuration folder) is the project's etc/: nothing is written outside it.
PATHS = {"/opt/sparkyard/.venv/bin/sparkyard": "sparkyard", "/opt/sparkyard/": f"{ROOT}/", "/etc/sparkyard": "etc"}


@dataclass(frozen=True)
class Line:
    doc: str  # relative to the repository
    number: int
    text: str  # the command, continuation lines joined, comment kept
    setup: str = ""  # the export lines before it in its code block, joined by "; "

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.number}"

    @property
    def command(self) -> str:
        """The command without its comment (a '#' outside quotes that starts a word)."""
        return _split_comment(self.text)[0]

    @property
    def expected(self) -> int:
        found = re.search(r"\bexits (\d+)\b", _split_comment(self.text)[1])
        return int(found.group(1)) if found else 0


def _split_comment(text: str) -> tuple[str, str]:
    quote = ""
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip(), text[i + 1:].strip()
    return text.rstrip(), ""


def documented_lines() -> list[Line]:
    """Every command line of ours in the code blocks of README.md and docs/*.md."""
    lines = []
    for path in DOCS:
        doc = str(path.relative_to(ROOT))
        in_block, pending, start, exporting = False, "", 0, False
        exports: list[str] = []
        for number, raw in enumerate(path.read_text().splitlines(), 1):
            if raw.strip().startswith("```"):
                in_block, exports = not in_block, []
                continue
            if not in_block:
                continue
            text = raw.strip()
            if pending:
                pending += " " + text
            elif COMMAND.match(text) or text.startswith("export "):
                pending, start, exporting = text, number, text.startswith("export ")
            else:
                continue
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            joined = re.sub(r"\s+", " ", pending.removeprefix("$ "))
            if exporting:
                exports.append(_split_comment(joined)[0])
            else:
                lines.append(Line(doc, start, joined, "; ".join(exports)))
            pending = ""
    return lines


def stand_ins(text: str) -> str:
    for path, stand_in in PATHS.items():
        text = text.replace(path, stand_in)
    return text


def expand(line: Line) -> list[str]:
    """The commands one documented line stands for: its verbs listed with | or / run one by one."""
    command = re.sub(r"\[([^\]]*)\]", r"\1", line.command)  # an optional part, included
    if command.startswith("$S "):
        command = "sparkyard " + command[3:]
    command = stand_ins(command)
    parts = [p.strip() for p in re.split(r" \| | / ", command)]
    first = parts[0].split()[0]
    return [p if p.split()[0] == first else f"{first} {p}" for p in parts]
