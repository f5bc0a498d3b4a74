"""The static half of tests/bench/bench_shape.py: lines, import cycles and callbacks set after construction.

Every measure reads a tree of this project (``common/`` as package ``sparkyard``, ``master/`` as
``sparkyard.master``, ``worker/`` as ``sparkyard.worker``, Lua in ``common/scripts/``); the generated
``common/v1/`` is left out of every count.
"""

from __future__ import annotations

import ast
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LIMIT_LINES = 400
# Attribute names whose .append/.add registers a callback on a live object.
CALLBACK_LISTS = ("listeners", "handlers", "callbacks")
REGISTERING_CALLS = ("append", "add")
OWN = ("self", "cls")


def product_files(tree: Path) -> Iterator[Path]:
    """The product's Python files, generated code excluded."""
    for top in ("common", "master", "worker"):
        for path in sorted((tree / top).rglob("*.py")):
            if not path.relative_to(tree).as_posix().startswith("common/v1/"):
                yield path


def count_lines(path: Path) -> int:
    return len(path.read_text(errors="replace").splitlines())


def lines(tree: Path) -> dict[str, Any]:
    """Physical lines (blank and comment lines included) of the product's Python and Lua."""
    py = {p.relative_to(tree).as_posix(): count_lines(p) for p in product_files(tree)}
    lua = {p.relative_to(tree).as_posix(): count_lines(p) for p in sorted((tree / "common/scripts").glob("*.lua"))}
    largest = sorted(py.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"python_lines": sum(py.values()), "python_modules": len(py), "lua_lines": sum(lua.values()),
            "lua_files": len(lua), "largest": largest[:10],
            "over_limit": [[name, n] for name, n in largest if n > LIMIT_LINES]}


def package_copy(tree: Path, dest: Path) -> Path:
    """A copy of the tree's product laid out as the installed package (``dest/sparkyard``): put ``dest``
    first on sys.path or PYTHONPATH and ``import sparkyard`` is this tree, whatever the virtualenv's
    editable install points at (its finder comes after the path entries)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(tree / "common", dest / "sparkyard", ignore=ignore)
    shutil.copytree(tree / "master", dest / "sparkyard" / "master", ignore=ignore)
    shutil.copytree(tree / "worker", dest / "sparkyard" / "worker", ignore=ignore)
    return dest


def tree_path(module_file: str, root: Path) -> str:
    """The tree's own path of a file of the package copy (``…/sparkyard/master/x.py`` → ``master/x.py``)."""
    try:
        rel = Path(module_file).resolve().relative_to(root.resolve() / "sparkyard").as_posix()
    except ValueError:
        return ""
    first = rel.split("/", 1)[0]
    return rel if first in ("master", "worker") else f"common/{rel}"


def import_cycles(package_root: Path) -> dict[str, Any]:
    """Strongly connected components (more than one module) of grimp's import graph of ``sparkyard``,
    with and without the imports under ``if TYPE_CHECKING:``. grimp reads every import statement,
    function-level (lazy) imports included."""
    import grimp

    sys.path.insert(0, str(package_root))
    try:
        out: dict[str, Any] = {}
        for label, exclude in (("all_imports", False), ("runtime_imports", True)):
            graph = grimp.build_graph("sparkyard", exclude_type_checking_imports=exclude, cache_dir=None)
            modules = sorted(m for m in graph.modules if not m.startswith("sparkyard.v1"))
            edges = {m: sorted(graph.find_modules_directly_imported_by(m) & set(modules)) for m in modules}
            out[label] = [sorted(c) for c in strongly_connected(edges) if len(c) > 1]
        return out
    finally:
        sys.path.remove(str(package_root))


def strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is a few hundred modules; recursion would do, but need not)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(component)
    return found


def _is_own(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in OWN


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _flatten(target)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        yield from _flatten(node.target)


def _flatten(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _flatten(element)
    else:
        yield target


def _name_of(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def late_callbacks(tree: Path) -> list[dict[str, Any]]:
    """Every statement matching the rule in bench_shape.py's docstring: ``where`` (``file:line: text``) and
    ``callable``: the value set looks like a callback or a way back to the setter — a lambda, ``self``
    or anything reached from ``self`` (a bound method: ``self.metrics.timed_call``), or any value set on
    an attribute named ``on_*``; every .append/.add onto a callback list."""
    hits: dict[str, bool] = {}
    for path in product_files(tree):
        text = path.read_text(errors="replace")
        source = text.splitlines()
        rel = path.relative_to(tree).as_posix()
        for node in ast.walk(ast.parse(text, filename=rel)):
            found = _late_set(node)
            if found is not None:
                where = f"{rel}:{node.lineno}: {source[node.lineno - 1].strip()}"  # type: ignore[attr-defined]
                hits[where] = hits.get(where, False) or found
    return [{"where": w, "callable": c} for w, c in sorted(hits.items(), key=lambda kv: _hit_order(kv[0]))]


def _late_set(node: ast.AST) -> bool | None:
    """None if ``node`` sets nothing on another object; else whether the value set looks callable."""
    if any(isinstance(t, ast.Attribute) and not _is_own(t.value) for t in _targets(node)):
        if isinstance(node, ast.AugAssign):
            return False
        named_on = any(isinstance(t, ast.Attribute) and t.attr.startswith("on_") for t in _targets(node))
        return named_on or _callable_shaped(getattr(node, "value", None))
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name) and func.id == "setattr" and node.args and not _is_own(node.args[0]):
        return len(node.args) == 3 and _callable_shaped(node.args[2])
    if (isinstance(func, ast.Attribute) and func.attr in REGISTERING_CALLS
            and _name_of(func.value).endswith(CALLBACK_LISTS)):
        return True
    return None


def _callable_shaped(value: ast.expr | None) -> bool:
    while isinstance(value, ast.Attribute):
        value = value.value
    return isinstance(value, ast.Lambda) or (isinstance(value, ast.Name) and value.id in OWN)


def _hit_order(hit: str) -> tuple[str, int]:
    file, line, _ = hit.split(":", 2)
    return file, int(line)
