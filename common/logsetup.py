"""Process logging: one line per event, UTC timestamps with milliseconds, ids as key=value in the text."""

from __future__ import annotations

import logging
import sys
import time

FORMAT = "%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s %(message)s"


def configure_logging(level: str = "INFO", process: str = "") -> None:
    valid = logging.getLevelNamesMapping()
    if level.upper() not in valid:
        raise ValueError(f"log level {level!r}: use one of DEBUG, INFO, WARNING, ERROR")
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter(FORMAT.replace("%(name)s", f"{process} %(name)s" if process else "%(name)s"),
                                  datefmt="%Y-%m-%dT%H:%M:%S")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Chatty libraries stay at WARNING unless we debug.
    for noisy in ("asyncio", "grpc", "py4j"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
