"""Where an attempt's code is and which directory it runs in — the same rule under every runner.

Working directory (``cwd`` of the attempt), first that applies:

1. ``--cwd DIR`` of the job; it must exist on the worker (else the attempt fails saying so);
2. the directory ``sparkyard submit`` ran in, when it exists on the worker **with the job's entrypoint in
   it** — the worker shares the user's files (same machine, or a shared filesystem), so relative paths
   resolve exactly as under ``spark-submit``. An empty or unrelated directory of the same name (a mount
   point, another user's checkout) is not taken for it;
3. the root of the job's shipped bundle, which mirrors the submit directory's layout for every file that
   was shipped (entrypoint, ``--py-files``, ``--files``, ``--bundle DIR``), so the same relative paths
   resolve there too;
4. the attempt's scratch directory (a job submitted without a bundle and from nowhere the worker knows).

``sys.path`` of the attempt starts with the entrypoint's directory (as ``python script.py`` does), then
the bundle root, then each ``--py-files`` entry (a .zip/.egg itself, a .py file's directory).

Executors see the same code through the bundle's archive: ``executor_path`` names the directories of
``sys.path`` that lie in the bundle as places inside the archive (``<digest>.zip``, ``<digest>.zip/lib``),
which Python imports from directly; ``.zip``/``.egg`` py-files and the job's ``--files`` are handed to
Spark one by one (every runner says how).
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sparkyard.spec import SpecError, parse_entrypoint
from sparkyard.worker.bundles import archive_of
from sparkyard.v1 import sparkyard_pb2 as pb


class WorkspaceError(Exception):
    """The attempt cannot be placed on this worker (a missing --cwd, a bad entrypoint)."""


@dataclass(frozen=True)
class Workspace:
    entrypoint: str  # absolute file path[:func], or package.module:func
    cwd: str
    sys_path: tuple[str, ...]
    py_files: tuple[str, ...]  # absolute paths (spark-submit --py-files, SparkContext.addPyFile)
    bundle_root: str = ""  # where the job's shipped bundle is extracted ('' = none)
    archive: str = ""  # the bundle's verified zip ('' without a bundle): shipped to executors
    executor_path: tuple[str, ...] = ()  # sys.path entries in the bundle, as ARCHIVE_NAME[/DIR]
    files: tuple[str, ...] = ()  # absolute paths of the job's --files (spark-submit --files, SparkContext.addFile)


def workspace(spec: pb.JobSpec, bundle_root: Path | None, scratch: Path | Callable[[], Path]) -> Workspace:
    """Where the attempt of ``spec`` runs; ``scratch`` (or what it returns: most attempts never need one)
    is its own directory, for the last rule above."""
    base = str(bundle_root) if bundle_root is not None else ""
    layout = _layout(spec.entrypoint, tuple(spec.py_files), tuple(spec.files), base)
    return Workspace(layout.entrypoint, _cwd(spec, layout.entry_file, base, scratch), layout.sys_path, layout.py_files,
                     base, layout.archive, layout.executor_path, layout.files)


@dataclass(frozen=True)
class _Layout:
    """What a workspace is, but for its working directory: the same for every attempt of a job version."""

    entrypoint: str
    entry_file: str  # the entrypoint's file as the job names it ('' for a module)
    sys_path: tuple[str, ...]
    py_files: tuple[str, ...]
    archive: str
    executor_path: tuple[str, ...]
    files: tuple[str, ...]


@functools.lru_cache(maxsize=1024)
def _layout(entrypoint: str, spec_py_files: tuple[str, ...], spec_files: tuple[str, ...], base: str) -> _Layout:
    """Worked out once per job version and bundle, not per attempt: a split run's thousands of attempts
    share it (paths only: nothing here looks at the file system)."""
    try:
        entry = parse_entrypoint(entrypoint)
    except SpecError as exc:
        raise WorkspaceError(str(exc)) from None
    entry_path = os.path.join(base, entry.path) if entry.is_file and base else entry.path
    resolved = (f"{entry_path}:{entry.func}" if entry.func else entry_path) if entry.is_file else str(entry)
    py_files = tuple(os.path.join(base, p) if base else p for p in spec_py_files)
    files = tuple(os.path.join(base, p) if base else p for p in spec_files)
    sys_path: list[str] = []
    if entry.is_file:
        sys_path.append(os.path.dirname(entry_path))
    if base:
        sys_path.append(base)
    for path in py_files:
        sys_path.append(path if path.endswith((".zip", ".egg")) else os.path.dirname(path))
    paths = tuple(dict.fromkeys(sys_path))
    archive = str(archive_of(Path(base))) if base else ""
    return _Layout(resolved, entry.path if entry.is_file else "", paths, py_files, archive,
                   _executor_path(paths, base, os.path.basename(archive)), files)


def _executor_path(sys_path: tuple[str, ...], base: str, archive_name: str) -> tuple[str, ...]:
    """The directories of ``sys_path`` inside the bundle root, as paths inside its archive."""
    if not base:
        return ()
    out = []
    for path in sys_path:
        rel = os.path.relpath(path, base)
        if rel == ".":
            out.append(archive_name)
        elif not rel.startswith("..") and not path.endswith((".zip", ".egg")):
            out.append(f"{archive_name}/{rel}")
    return tuple(out)


def _cwd(spec: pb.JobSpec, entry_path: str, bundle_root: str, scratch: Path | Callable[[], Path]) -> str:
    if spec.cwd:
        if not os.path.isdir(spec.cwd):
            raise WorkspaceError(f"working directory {spec.cwd} (--cwd) does not exist on worker host "
                                 f"{socket.gethostname()}")
        return spec.cwd
    submit_dir = spec.submit_dir
    if submit_dir and os.path.isdir(submit_dir):
        if not bundle_root:
            return submit_dir
        if entry_path and os.path.isfile(os.path.join(submit_dir, entry_path)):
            return submit_dir
    if bundle_root:
        return bundle_root
    directory = scratch if isinstance(scratch, Path) else scratch()
    directory.mkdir(parents=True, exist_ok=True)
    return str(directory)
