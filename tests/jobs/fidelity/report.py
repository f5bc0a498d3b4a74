"""Shared by the fidelity programs: each writes what it saw as JSON to --out and exits as asked."""

from __future__ import annotations

import argparse
import json
from typing import Any


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    return p


def write(path: str, result: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(result, f, sort_keys=True)
