"""Code shipping, client side: the files a job needs, packed as one content-addressed bundle.

A bundle is a **deterministic zip** (entries sorted, fixed timestamps and permissions), so the same files
give the same sha256 digest: a resubmitted or recurring job reuses the bundle already stored, and the
client uploads only what the master does not have.

Layout — the bundle root mirrors the directory the user submits from:

* the root R is ``--bundle DIR`` when given, else the submit directory (the client's working directory);
* with ``--bundle DIR`` every file under DIR is in the bundle, except what ``DIR/.sparkyardignore``
  (gitignore syntax) and the built-in ignores (``.git/``, ``__pycache__/``, ``*.pyc``, ``.sparkyard/``,
  ``.venv/``) exclude;
* a script's sibling modules — the ``.py`` files beside it and the packages (directories with an
  ``__init__.py``) beside it, minus that directory's ``.sparkyardignore`` and the built-in ignores — go
  with it, placed beside it, as spark-submit finds them on ``sys.path`` (at most ``SIBLINGS_MAX_BYTES``
  in all; beyond that none go, and ``--bundle``/``--py-files`` say what to ship);
* the entrypoint file, each ``--py-files`` entry and each ``--files`` entry is stored at its path relative
  to R when it lies inside R, else under its base name at the root;
* the job's spec then names the entrypoint, py-files and files relative to the bundle root.

The worker extracts the bundle once per digest (worker/bundles.py); docs/shipping.md has the whole story.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pathspec

from sparkyard.errors import InvalidArgument

log = logging.getLogger(__name__)

IGNORE_FILE = ".sparkyardignore"
# Never shipped: version control, caches, virtualenvs and Sparkyard's own data directory.
BUILTIN_IGNORES = (".git/", "__pycache__/", "*.pyc", ".sparkyard/", ".venv/")
# Chunks of an upload or a fetch (well inside gRPC's message limits).
CHUNK_BYTES = 1024 * 1024
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
# The most a script's sibling modules may weigh to go with it unasked (a script in a big directory of
# unrelated code ships alone, as before).
SIBLINGS_MAX_BYTES = 16 * 1024 * 1024
_SAID_TOO_BIG: set[Path] = set()  # folders whose modules were too big to ship, said so once


@dataclass(frozen=True)
class Bundle:
    digest: str  # sha256 hex of ``data``
    data: bytes
    entrypoint: str  # relative to the bundle root, with ``:func`` if any ('' for a module entrypoint)
    py_files: tuple[str, ...]  # relative to the bundle root
    files: tuple[str, ...] = ()  # the --files entries, relative to the bundle root


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _ignores(directory: Path) -> pathspec.GitIgnoreSpec:
    ignore_file = directory / IGNORE_FILE
    return _compiled_ignores(tuple(ignore_file.read_text().splitlines()) if ignore_file.is_file() else ())


@functools.lru_cache(maxsize=64)
def _compiled_ignores(lines: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    """Kept by the file's lines: compiling them was a quarter of building a spec, which a bulk submit does
    per job for the same folder."""
    return pathspec.GitIgnoreSpec.from_lines([*BUILTIN_IGNORES, *lines])


def _walk(directory: Path) -> list[Path]:
    spec = _ignores(directory)
    files = []
    for base, dirs, names in os.walk(directory):  # symlinked directories are not followed
        rel_base = Path(base).relative_to(directory)
        dirs[:] = sorted(d for d in dirs if not spec.match_file(f"{(rel_base / d).as_posix()}/"))
        files += [Path(base, n) for n in names if not spec.match_file((rel_base / n).as_posix())]
    return files


def build(entry_path: Path | None, func: str, *, submit_dir: Path, bundle_dir: Path | None = None,
          py_files: tuple[Path, ...] = (), files: tuple[Path, ...] = ()) -> Bundle:
    """Pack a job's files (absolute paths; no entry path for a module entrypoint); InvalidArgument names
    a missing, unreadable or clashing file."""
    listed = (entry_path,) if entry_path is not None else ()
    stamps = tuple((str(p), _stamp(p)) for p in (*listed, *py_files, *files))
    tree = _tree_stamp(bundle_dir) if bundle_dir is not None else ()
    near = siblings(entry_path) if entry_path is not None and bundle_dir is None else ()
    return _build(entry_path, func, submit_dir, bundle_dir, py_files, files, stamps, tree, near)


def siblings(entry_path: Path) -> tuple[tuple[str, int, int], ...]:
    """The Python modules and packages beside a script (with their versions), or none if they weigh more
    than SIBLINGS_MAX_BYTES."""
    directory, entry = str(entry_path.parent), str(entry_path)
    under = directory.rstrip(os.sep) + os.sep  # a script in / has its packages at /pkg
    spec = _ignores(entry_path.parent)
    found: list[str] = []
    # Paths as strings, not Path objects: a bulk submit walks the same folder once per job, and pathlib's
    # parsing was most of that walk.
    for base, dirs, names in os.walk(directory):  # into packages only: a home directory is not walked
        rel = "" if base == directory else base[len(under):].replace(os.sep, "/") + "/"
        dirs[:] = sorted(d for d in dirs if os.path.isfile(os.path.join(base, d, "__init__.py"))
                         and not spec.match_file(f"{rel}{d}/"))
        found += [path for path in (os.path.join(base, n) for n in names if n.endswith(".py"))
                  if path != entry and not spec.match_file(rel + os.path.basename(path))]
    # Ordered by path components, as Path objects sort (the stamps key the packed bundle's cache).
    stamped = tuple((p, *_stamp(p)) for p in sorted(found, key=lambda p: p.split(os.sep)))
    total = sum(size for _, _, size in stamped)
    if total <= SIBLINGS_MAX_BYTES:
        return stamped
    if entry_path.parent not in _SAID_TOO_BIG:  # said once per folder: a bulk submit builds its bundle many times
        _SAID_TOO_BIG.add(entry_path.parent)
        largest = max(stamped, key=lambda s: s[2])[0]
        log.warning("the Python modules beside %s are not shipped with it: they weigh %.1f MiB, over %g MiB "
                    "(the largest: %s); ship what it imports with --py-files, or --bundle DIR with a %s",
                    entry_path.name, total / 2**20, SIBLINGS_MAX_BYTES / 2**20, Path(largest).name, IGNORE_FILE)
    return ()


def _stamp(path: str | Path) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        raise InvalidArgument(f"file not found: {path}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidArgument(f"not a file: {path}")
    return st.st_mtime_ns, st.st_size


def _tree_stamp(directory: Path) -> tuple[tuple[str, int, int], ...]:
    if not directory.is_dir():
        raise InvalidArgument(f"bundle: {directory} is not a directory")
    return tuple((str(p), *_stamp(p)) for p in _walk(directory))


@functools.lru_cache(maxsize=32)
def _build(entry_path: Path | None, func: str, submit_dir: Path, bundle_dir: Path | None, py_files: tuple[Path, ...],
           files: tuple[Path, ...], stamps: object, tree: tuple[tuple[str, int, int], ...],
           near: tuple[tuple[str, int, int], ...] = ()) -> Bundle:
    """Cached per set of files and their versions: a bulk submit of one entrypoint packs it once."""
    root = bundle_dir or submit_dir
    members: dict[str, Path] = {Path(name).relative_to(root).as_posix(): Path(name) for name, _, _ in tree}
    placed: dict[str, str] = {}

    def place(path: Path) -> str:
        name = _relative(path, root)
        other = members.get(name)
        if other is not None and other.resolve() != path.resolve():
            raise InvalidArgument(f"bundle: {path} and {other} would both be shipped as {name}")
        members[name] = path
        placed[str(path)] = name
        return name

    entry = place(entry_path) if entry_path is not None else ""
    if entry_path is not None:
        beside = Path(entry).parent
        for name, _, _ in near:  # placed beside the entrypoint; a file also given by name is placed once
            members.setdefault((beside / Path(name).relative_to(entry_path.parent)).as_posix(), Path(name))
    shipped_py = tuple(place(p) for p in py_files)
    shipped_files = tuple(place(p) for p in files)
    by_name: dict[str, str] = {}
    for name in shipped_files:
        other = by_name.setdefault(Path(name).name, name)
        if other != name:
            raise InvalidArgument(f"files: {other} and {name} have the same name, and Spark knows a file it "
                                  "ships (SparkFiles.get) by its name alone")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, _ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            try:
                archive.writestr(info, members[name].read_bytes())
            except OSError as exc:
                raise InvalidArgument(f"bundle: cannot read {members[name]}: {exc.strerror}") from None
    data = buffer.getvalue()
    bundle = Bundle(hashlib.sha256(data).hexdigest(), data, f"{entry}:{func}" if func and entry else entry,
                  shipped_py, shipped_files)
    _recent[:] = [bundle, *_recent[:_RECENT_KEPT - 1]]
    return bundle


def built(digest: str) -> Bundle | None:
    """A bundle this process built recently (so a spec from ``build_spec`` can still be uploaded)."""
    for bundle in _recent:
        if bundle.digest == digest:
            return bundle
    return None


_recent: list[Bundle] = []
_RECENT_KEPT = 32


def chunks(data: bytes) -> list[bytes]:
    return [data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
