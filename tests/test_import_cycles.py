"""No ctxgraph module imports itself through others, not even from inside a function.

``test_layering`` checks the imports that run when a module is loaded. An import inside a
function runs later, so it cannot fail at load time, but a cycle it closes is still a
cycle: the two modules cannot be understood, tested or moved apart. This test counts
every import statement of every module under ``ctxgraph/``:

- at module level and at any depth inside functions, methods and classes;
- relative imports resolved against the importing module's package;
- ``from ctxgraph.a import b`` is an import of the module ``ctxgraph.a.b`` when
  ``ctxgraph/a/b.py`` or ``ctxgraph/a/b/__init__.py`` exists, else of ``ctxgraph.a`` (``b``
  is a name defined there);
- importing ``ctxgraph.a.b`` runs the package ``ctxgraph.a`` first, so it imports that
  package too, unless the importer is inside it (the package is then already loading);
- imports under ``if TYPE_CHECKING:`` are left out: they never run, and annotations are
  not a dependency between the modules' code.

Package ``__init__`` files that re-export names lazily (``ctxgraph``, ``ctxgraph.state``,
``ctxgraph.graph``) list them in a module-level dict of name -> module and load them in
``__getattr__`` with ``importlib.import_module``. Such a package imports only what its
module-level statements import: loading it loads none of the modules it names. The import
happens when a name is asked for, so ``from ctxgraph.state import Settings`` counts as an
import of the module the dict names (``ctxgraph.state.settings``) by the module that asks.
"""

from __future__ import annotations

import ast
import itertools
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ctxgraph"
NAMESPACE = "ctxgraph"


@dataclass(frozen=True)
class Edge:
    """One import of a ctxgraph module by another, and where it is written."""

    source: str
    target: str
    where: str
    """``path:line`` of the import statement."""


@dataclass(frozen=True)
class Module:
    """One module file: its dotted name, whether it is a package, and its source."""

    name: str
    path: str
    is_package: bool
    tree: ast.Module


def module_name(relative: Path) -> tuple[str, bool]:
    """The dotted name of the file at ``relative`` (inside ``ctxgraph/``), and if a package."""
    parts = [NAMESPACE, *relative.with_suffix("").parts]
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


@cache
def repository() -> dict[str, Module]:
    """Every module under ``ctxgraph/``, by dotted name."""
    found: dict[str, Module] = {}
    for file in sorted(PACKAGE.rglob("*.py")):
        relative = file.relative_to(PACKAGE)
        name, is_package = module_name(relative)
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        found[name] = Module(name, f"ctxgraph/{relative.as_posix()}", is_package, tree)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def import_statements(tree: ast.AST) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree`` at any depth, except those under TYPE_CHECKING."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))


def lazy_exports(module: Module) -> dict[str, str]:
    """Name -> module of a package that loads its names on demand in ``__getattr__``.

    Read from the module-level dicts of string constants whose values are ctxgraph modules;
    empty unless the module defines ``__getattr__`` at module level.
    """
    body = module.tree.body
    if not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in body):
        return {}
    exports: dict[str, str] = {}
    for node in body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if not isinstance(value, ast.Dict):
            continue
        pairs = [
            (key.value, item.value)
            for key, item in zip(value.keys, value.values, strict=True)
            if isinstance(key, ast.Constant)
            and isinstance(key.value, str)
            and isinstance(item, ast.Constant)
            and isinstance(item.value, str)
        ]
        exports.update(
            (name, target) for name, target in pairs if target.split(".")[0] == NAMESPACE
        )
    return exports


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    """The module a ``from`` import names, relative imports resolved."""
    if node.level == 0:
        return node.module or ""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imported_modules(
    module: Module, node: ast.Import | ast.ImportFrom, known: Mapping[str, Module]
) -> list[str]:
    """The ctxgraph modules one import statement of ``module`` loads (see the docstring)."""
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    else:
        base = _absolute(module, node)
        lazy = lazy_exports(known[base]) if base in known else {}
        named = []
        for alias in node.names:
            if f"{base}.{alias.name}" in known:
                named.append(f"{base}.{alias.name}")
            else:
                named += [base, *([lazy[alias.name]] if alias.name in lazy else [])]
    targets: list[str] = []
    loading = _ancestors(module.name) + ([module.name] if module.is_package else [])
    for name in named:
        for target in [*_ancestors(name), name]:
            if target in known and target != module.name and target not in loading:
                targets.append(target)
    return list(dict.fromkeys(targets))


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_edges(known: Mapping[str, Module]) -> list[Edge]:
    """Every import of a ctxgraph module by another, in file order."""
    edges: list[Edge] = []
    for module in known.values():
        statements = sorted(import_statements(module.tree), key=lambda n: n.lineno)
        for node in statements:
            for target in imported_modules(module, node, known):
                edges.append(Edge(module.name, target, f"{module.path}:{node.lineno}"))
    return edges


def strong_components(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def shortest_cycle(graph: Mapping[str, Iterable[str]], start: str) -> list[str] | None:
    """A shortest cycle through ``start``, as ``[start, ..., start]``; None if there is none."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph.get(node, ())):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if target not in came_from:
                came_from[target] = node
                queue.append(target)
    return None


def cycle_report(edges: Iterable[Edge]) -> list[str]:
    """One line per cycle: its modules and where each of its imports is written.

    Each module of a strongly connected group gets the shortest cycle through it, so
    two cycles that share a module are both named.
    """
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        where.setdefault((edge.source, edge.target), edge.where)
    found: dict[tuple[str, ...], list[str]] = {}
    for component in strong_components(graph):
        for member in component:
            path = shortest_cycle(graph, member)
            assert path is not None, member
            loop = path[:-1]
            first = loop.index(min(loop))
            key = tuple(loop[first:] + loop[:first])
            found.setdefault(key, [*key, key[0]])
    lines: list[str] = []
    for path in found.values():
        steps = ", ".join(where[pair] for pair in itertools.pairwise(path))
        lines.append(f"{' -> '.join(path)} (imports at {steps})")
    return sorted(lines)


def test_the_repository_is_read() -> None:
    modules = repository()
    assert "ctxgraph.state.settings" in modules
    assert modules["ctxgraph.state"].is_package
    assert lazy_exports(modules["ctxgraph.state"])["Settings"] == "ctxgraph.state.settings"


def test_no_import_cycles_between_modules_at_any_depth() -> None:
    found = cycle_report(import_edges(repository()))
    assert not found, f"{len(found)} import cycle(s), counting imports inside functions:\n" + (
        "\n".join(found)
    )


# --- the checker itself, on synthetic modules ----------------------------------------


def _modules(sources: Mapping[str, str]) -> dict[str, Module]:
    """Synthetic modules from ``relative path -> source``."""
    found: dict[str, Module] = {}
    for path, source in sources.items():
        name, is_package = module_name(Path(path))
        found[name] = Module(name, f"ctxgraph/{path}", is_package, ast.parse(source))
    return found


def _targets(sources: Mapping[str, str]) -> set[tuple[str, str]]:
    return {(edge.source, edge.target) for edge in import_edges(_modules(sources))}


def test_imports_inside_functions_close_a_cycle_and_the_report_names_the_lines() -> None:
    sources = {
        "a/__init__.py": "",
        "a/one.py": "from ctxgraph.a.two import X\n",
        "a/two.py": "X = 1\n\ndef f():\n    from ctxgraph.a import one\n    return one\n",
    }
    assert cycle_report(import_edges(_modules(sources))) == [
        "ctxgraph.a.one -> ctxgraph.a.two -> ctxgraph.a.one "
        "(imports at ctxgraph/a/one.py:1, ctxgraph/a/two.py:4)"
    ]


def test_type_checking_imports_are_left_out() -> None:
    sources = {
        "a.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from ctxgraph.b import B\n",
        "b.py": "import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    import ctxgraph.a\n",
    }
    assert _targets(sources) == {("ctxgraph.b", "ctxgraph.a")}


def test_from_import_resolves_a_submodule_or_a_name_and_relative_imports() -> None:
    sources = {
        "p/__init__.py": "",
        "p/sub/__init__.py": "",
        "p/mod.py": "from . import sub, NAME\nfrom .sub import thing\nfrom ..q import r\n",
        "q.py": "r = 1\n",
    }
    assert _targets(sources) == {
        ("ctxgraph.p.mod", "ctxgraph.p.sub"),  # a subpackage; ctxgraph.p is already loading
        ("ctxgraph.p.mod", "ctxgraph.q"),  # r is a name of the module ctxgraph.q
    }


def test_lazy_exports_are_charged_to_the_module_that_asks_for_them() -> None:
    package = (
        "_MODULES = {'Thing': 'ctxgraph.p.thing'}\n\n"
        "def __getattr__(name):\n"
        "    from importlib import import_module\n\n"
        "    return getattr(import_module(_MODULES[name]), name)\n"
    )
    sources = {
        "p/__init__.py": package,
        "p/thing.py": "from ctxgraph.user import helper\nThing = 1\n",
        "user.py": "helper = 1\n\ndef f():\n    from ctxgraph.p import Thing\n    return Thing\n",
    }
    assert _targets(sources) == {
        ("ctxgraph.p.thing", "ctxgraph.user"),
        ("ctxgraph.user", "ctxgraph.p"),
        ("ctxgraph.user", "ctxgraph.p.thing"),
    }
    assert len(cycle_report(import_edges(_modules(sources)))) == 1


def test_importing_a_submodule_loads_its_packages_unless_inside_them() -> None:
    sources = {
        "p/__init__.py": "from ctxgraph.p.inner import x\n",
        "p/inner.py": "x = 1\n",
        "p/user.py": "from ctxgraph.p.inner import x\n",
        "outside.py": "import ctxgraph.p.inner\n",
    }
    assert _targets(sources) == {
        ("ctxgraph.p", "ctxgraph.p.inner"),
        ("ctxgraph.p.user", "ctxgraph.p.inner"),
        ("ctxgraph.outside", "ctxgraph.p"),
        ("ctxgraph.outside", "ctxgraph.p.inner"),
    }
