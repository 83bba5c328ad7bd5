"""The shape of ``app/``'s imports, read from the source (``ast``, nothing imported):

- no import cycle between modules inside ``app/`` (every ``import``, type-only and
  function-level ones included: a cycle broken by a lazy import is still a cycle);
- no module reaches into another's private names: ``from x import _name``, or
  ``obj._name`` (read or written) where this module defines no ``_name`` itself.

The few known exceptions are listed below, each with its reason, so this test fails on
anything new; a change that removes one removes its entry (an entry nothing matches any more
fails too, so the lists only shrink).
"""

from __future__ import annotations

import ast
import fnmatch
import functools
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Import edges (importer, imported; fnmatch patterns) left out of the cycle check.
ALLOWED_EDGES: dict[tuple[str, str], str] = {
    ("app.api", "app.api.*"): "Flask blueprint: the package imports its endpoint modules last, "
                              "so their routes register on the bp they import from it",
    ("app.ui", "app.ui.*"): "Flask blueprint, as app.api",
    ("app", "app.api"): "create_app registers the blueprints; app.api's modules read "
                        "app.__version__",
    ("app", "app.ui"): "create_app registers the blueprints; app.ui reads app.__version__",
    ("app.storage.sqlite_write", "app.storage.sqlite"): "type-only: the write side names the "
                                                         "store it serves",
}

# (module, private name) pairs a module may reach into across modules, each with its reason.
ALLOWED_PRIVATE: dict[tuple[str, str], str] = {
    ("app.query.filters", "_Regexp"): "the re2 binding exposes its pattern type only so",
    ("app.server.worker", "_exit"): "os._exit: a forked child leaves without cleanup",
    ("app.api.exp_serialize", "_format_values"): "shares serialize's dps formatting",
    ("app.api.histogram", "_respond"): "shares put's response (details/summary)",
    ("app.api.rollup", "_respond"): "shares put's response (details/summary)",
    ("app.storage.hbase", "_refresh_thrift_client"):
        "happybase's pool calls it to give a failed connection a new socket and transport; "
        "it has no public way, and a call cut short otherwise leaves its reply on the socket",
}


@dataclass
class Module:
    name: str
    tree: ast.Module
    imports: set[str] = field(default_factory=set)
    private_uses: set[str] = field(default_factory=set)


@functools.cache
def _modules() -> dict[str, Module]:
    found = {}
    for path in sorted((ROOT / "app").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        found[name] = Module(name, ast.parse(path.read_text(encoding="utf-8")))
    for module in found.values():
        _read(module, found)
    return found


def _resolve(name: str, modules: dict[str, Module]) -> str | None:
    """The module an imported name lives in: itself, or the nearest package above it."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined(tree: ast.Module) -> set[str]:
    """Names this module defines: functions, classes, variables, arguments, and attributes
    it sets on ``self``/``cls``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
    return names


def _read(module: Module, modules: dict[str, Module]) -> None:
    own = _defined(module.tree)
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names]
            if node.module.split(".")[0] == "app":
                module.private_uses |= {a.name for a in node.names if _private(a.name)}
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            is_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if not is_self and node.attr not in own:
                module.private_uses.add(node.attr)
            continue
        else:
            continue
        for target in targets:
            if target.split(".")[0] == "app":
                resolved = _resolve(target, modules)
                if resolved is not None and resolved != module.name:
                    module.imports.add(resolved)


def _allowed_edge(importer: str, imported: str) -> str | None:
    for (source, target) in ALLOWED_EDGES:
        if fnmatch.fnmatchcase(importer, source) and fnmatch.fnmatchcase(imported, target):
            return f"{source} -> {target}"
    return None


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph``, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            following = next(stack[-1], None)
            if following is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(following) == 1:
                return path[path.index(following):] + [following]
            elif following not in state:
                state[following] = 1
                path.append(following)
                stack.append(iter(sorted(graph.get(following, ()))))
    return None


def test_no_import_cycle_inside_app_beyond_the_allowed_edges() -> None:
    modules = _modules()
    used: set[str] = set()
    graph: dict[str, set[str]] = {}
    for module in modules.values():
        graph[module.name] = set()
        for imported in module.imports:
            allowed = _allowed_edge(module.name, imported)
            if allowed is None:
                graph[module.name].add(imported)
            else:
                used.add(allowed)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
    stale = {f"{s} -> {t}" for s, t in ALLOWED_EDGES} - used
    assert not stale, f"allowed edges no import uses any more (remove them): {sorted(stale)}"


def test_no_module_reaches_into_another_modules_private_names() -> None:
    found = {(module.name, name) for module in _modules().values()
             for name in module.private_uses}
    new = sorted(found - set(ALLOWED_PRIVATE))
    assert not new, f"private names used across modules: {new}"
    stale = sorted(set(ALLOWED_PRIVATE) - found)
    assert not stale, f"allowed private uses gone (remove them from the list): {stale}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    # The checker itself: a three-module cycle is found, a chain is not.
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
