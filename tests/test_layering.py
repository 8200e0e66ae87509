"""The package layout is a layering: imports point down, stay public and form no cycles.

Layers, lowest first: ``state``, ``store``, ``nodes``, ``graph``. A module may import its
own layer and the layers below it, always through the ``ctxgraph`` namespace, never a
private (underscore) module of LangGraph or LangChain, and module-level imports (the
type-only ones under ``TYPE_CHECKING`` too) form no cycle anywhere in the package, neither
between modules nor between components (a layer's subpackages and top-level modules, e.g.
``nodes.compaction`` and ``nodes.request``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ctxgraph"
"""The package tree: the real folders of the layers (the top-level names only link here)."""
NAMESPACE = "ctxgraph"
LAYERS = ("state", "store", "nodes", "graph")
"""The packages, lowest layer first."""
RANK = {layer: rank for rank, layer in enumerate(LAYERS)}
VENDORS = ("langgraph", "langchain")
"""Distributions whose underscore modules and names are private."""


@dataclass(frozen=True)
class Import:
    """One imported module, as written in a file."""

    line: int
    module: str
    """The absolute module path (relative imports resolved); ``from X import y`` gives X."""
    names: tuple[str, ...]
    """Names of a ``from`` import; empty for ``import X``."""
    relative: bool
    runtime: bool
    """Executed when the importing module is: not inside a function, not type-only."""
    type_only: bool = False
    """Under a module-level ``if TYPE_CHECKING:``: read by type checkers and readers alike."""


Check = Callable[[str, str, Iterable[Import]], list[str]]
"""A rule: (file, module, its imports) -> one message per broken import."""


class _Collector(ast.NodeVisitor):
    """Every import of a module, at any depth, with whether it runs at import time."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.imports: list[Import] = []
        self._deferred = 0
        self._functions = 0

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._function(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._deferred += 1
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1
        self._deferred -= 1

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.visit(node.test)
        self._deferred += 1
        for statement in node.body:
            self.visit(statement)
        self._deferred -= 1
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node.lineno, alias.name, (), relative=False)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        names = tuple(alias.name for alias in node.names)
        if node.level == 0:
            self._add(node.lineno, node.module or "", names, relative=False)
            return
        base = self.package.split(".")
        base = base[: len(base) - (node.level - 1)]
        module = ".".join([*base, node.module] if node.module else base)
        self._add(node.lineno, module, names, relative=True)

    def _add(self, line: int, module: str, names: tuple[str, ...], *, relative: bool) -> None:
        runtime, type_only = not self._deferred, bool(self._deferred and not self._functions)
        self.imports.append(Import(line, module, names, relative, runtime, type_only))


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def imports_in(source: str, package: str) -> list[Import]:
    """Imports of ``source``, a module of ``package`` (which resolves relative imports)."""
    collector = _Collector(package)
    collector.visit(ast.parse(source))
    return collector.imports


def layer_of(module: str) -> str | None:
    """The layer a ``ctxgraph`` module belongs to, None outside the layers."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == NAMESPACE and parts[1] in RANK:
        return parts[1]
    return None


def upward_imports(where: str, module: str, imports: Iterable[Import]) -> list[str]:
    """Imports of ``module`` (in file ``where``) that reach a higher layer, or the root."""
    own = layer_of(module)
    if own is None:
        return []
    found: list[str] = []
    for item in imports:
        target = layer_of(item.module)
        if item.module == NAMESPACE:
            found.append(
                f"{where}:{item.line}: imports the {NAMESPACE} root; import the defining module"
            )
        elif target is not None and RANK[target] > RANK[own]:
            found.append(
                f"{where}:{item.line}: layer {own!r} imports the higher layer {target!r} "
                f"({item.module})"
            )
    return found


def bare_imports(where: str, module: str, imports: Iterable[Import]) -> list[str]:
    """Imports of a layer as a top-level package instead of through ``ctxgraph``."""
    return [
        f"{where}:{item.line}: imports bare {item.module!r}; write {NAMESPACE}.{item.module}"
        for item in imports
        if not item.relative and item.module.split(".")[0] in RANK
    ]


def private_imports(where: str, module: str, imports: Iterable[Import]) -> list[str]:
    """Imports of an underscore module or name of LangGraph or LangChain."""
    found: list[str] = []
    for item in imports:
        parts = item.module.split(".")
        if item.relative or not parts[0].startswith(VENDORS):
            continue
        private = [p for p in parts if p.startswith("_")]
        private += [n for n in item.names if n.startswith("_") and not n.endswith("__")]
        if private:
            found.append(
                f"{where}:{item.line}: imports private {item.module} ({', '.join(private)})"
            )
    return found


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def runtime_edges(
    imports: Mapping[str, Iterable[Import]],
    modules: Iterable[str] | None = None,
    *,
    type_only: bool = False,
) -> dict[str, set[str]]:
    """Module -> the known modules its module-level imports load.

    Loading ``a.b.c`` also loads the packages ``a`` and ``a.b``, unless the importer is
    inside them (then they are already loading); ``from a import b`` loads ``a.b`` when
    that is a module. With ``type_only``, the imports under ``TYPE_CHECKING`` count too.
    """
    known = set(imports) if modules is None else set(modules)
    edges: dict[str, set[str]] = {module: set() for module in known}
    for module, found in imports.items():
        inside = set(_ancestors(module))
        for item in found:
            if not (item.runtime or (type_only and item.type_only)):
                continue
            targets = [item.module, *(f"{item.module}.{name}" for name in item.names)]
            targets += _ancestors(item.module)
            edges[module].update(
                t for t in targets if t in known and t != module and t not in inside
            )
    return edges


def component_of(module: str) -> str:
    """A layer's subpackage or top-level module that ``module`` belongs to."""
    return ".".join(module.split(".")[:3])


def component_edges(edges: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """The module graph with each module replaced by its component."""
    merged: dict[str, set[str]] = {}
    for module, targets in edges.items():
        source = component_of(module)
        merged.setdefault(source, set()).update(
            component_of(t) for t in targets if component_of(t) != source
        )
    return merged


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Cycles found by a depth-first search, each as ``[a, b, ..., a]``, each once."""
    found: dict[tuple[str, ...], list[str]] = {}
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = "open"
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                loop = path[path.index(target) :]
                start = loop.index(min(loop))
                key = tuple(loop[start:] + loop[:start])
                found.setdefault(key, [*key, key[0]])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return list(found.values())


# --- the repository -----------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One module file of the layers."""

    path: str
    module: str
    imports: tuple[Import, ...]


@cache
def repository() -> tuple[Source, ...]:
    """Every module of the package: the layers, and those beside them (the middleware)."""
    sources: list[Source] = []
    for file in sorted(PACKAGE.rglob("*.py")):
        relative = file.relative_to(PACKAGE)
        parts = [NAMESPACE, *relative.with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        module = ".".join(parts)
        package = module if is_package else module.rpartition(".")[0]
        found = imports_in(file.read_text(encoding="utf-8"), package)
        sources.append(Source(relative.as_posix(), module, tuple(found)))
    return tuple(sources)


def repository_edges() -> dict[str, set[str]]:
    """Module-level import edges between the package's modules, type-only ones included."""
    return runtime_edges({s.module: s.imports for s in repository()}, type_only=True)


def _report(kind: str, found: list[str]) -> str:
    return f"{len(found)} {kind}:\n" + "\n".join(found)


def test_the_repository_has_modules_in_every_layer() -> None:
    layers = {layer_of(source.module) for source in repository()} - {None}
    assert layers == set(LAYERS)
    assert any(source.module == "ctxgraph.nodes.compaction" for source in repository())


@pytest.mark.parametrize(
    ("check", "kind"),
    [
        (upward_imports, "imports point up the layers"),
        (bare_imports, "imports bypass the ctxgraph namespace"),
        (private_imports, "imports of private LangGraph/LangChain modules"),
    ],
    ids=["layers", "namespace", "private"],
)
def test_imports_follow_the_rules(check: Check, kind: str) -> None:
    found = [
        message
        for source in repository()
        for message in check(source.path, source.module, source.imports)
    ]
    assert not found, _report(kind, found)


def test_no_import_cycles_between_modules() -> None:
    found = [" -> ".join(cycle) for cycle in cycles(repository_edges())]
    assert not found, _report("module import cycles", found)


def test_no_import_cycles_between_components() -> None:
    found = [" -> ".join(cycle) for cycle in cycles(component_edges(repository_edges()))]
    assert not found, _report("component import cycles", found)


# --- the checker itself, on synthetic sources ---------------------------------------


def _messages(source: str, module: str = "ctxgraph.state.models") -> list[str]:
    package = module.rpartition(".")[0]
    imports = imports_in(source, package)
    checks: list[Check] = [upward_imports, bare_imports, private_imports]
    return [message for check in checks for message in check("state/models.py", module, imports)]


def test_an_upward_import_inside_a_function_is_reported_with_file_line_and_layers() -> None:
    source = (
        "import os\n\n"
        "def demo():\n"
        "    from ctxgraph.graph.demo import demo_models\n"
        "    return demo_models\n"
    )
    assert _messages(source) == [
        "state/models.py:4: layer 'state' imports the higher layer 'graph' (ctxgraph.graph.demo)"
    ]


def test_upward_imports_are_reported_in_every_form() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import ctxgraph.nodes.request\n"
        "if TYPE_CHECKING:\n"
        "    from ctxgraph.store.namespaces import user_facts\n"
        "class Holder:\n"
        "    from ctxgraph.graph import builder\n"
    )
    found = _messages(source)
    assert [message.split(":")[1] for message in found] == ["2", "4", "6"]
    assert "'state' imports the higher layer 'nodes'" in found[0]
    assert "'state' imports the higher layer 'store'" in found[1]
    assert "'state' imports the higher layer 'graph'" in found[2]


def test_same_and_lower_layer_imports_pass() -> None:
    source = (
        "from ctxgraph.state.settings import Settings\n"
        "from ctxgraph.store.namespaces import user_facts\n"
        "from ctxgraph.nodes.compaction import partition_history\n"
        "from . import request\n"
        "from langgraph.prebuilt import ToolNode\n"
        "from langgraph.graph.message import add_messages\n"
        "from langchain_core.messages import __all__\n"
    )
    assert _messages(source, module="ctxgraph.nodes.model") == []


def test_bare_layer_imports_are_reported() -> None:
    source = "import nodes.request\nfrom state.settings import Settings\nimport graph\n"
    found = _messages(source, module="ctxgraph.graph.builder")
    assert [message.split(":")[1] for message in found] == ["1", "2", "3"]
    assert all("imports bare" in message for message in found)


def test_the_ctxgraph_root_is_not_imported_from_inside_the_layers() -> None:
    found = _messages("from ctxgraph import build_graph\n")
    assert found == ["state/models.py:1: imports the ctxgraph root; import the defining module"]


def test_private_langgraph_and_langchain_imports_are_reported() -> None:
    source = (
        "from langgraph._internal._runnable import RunnableCallable\n"
        "import langchain_core._api.deprecation\n"
        "from langgraph.prebuilt import _tool_call_transformer\n"
        "from langgraph.graph import StateGraph\n"
        "from mypackage._private import thing\n"
    )
    found = _messages(source, module="ctxgraph.graph.builder")
    assert [message.split(":")[1] for message in found] == ["1", "2", "3"]
    assert all("imports private" in message for message in found)


def test_relative_imports_resolve_against_the_package() -> None:
    source = "from . import partition\nfrom ..request import RequestBuilder\n"
    found = imports_in(source, "ctxgraph.nodes.compaction")
    assert [(i.module, i.names, i.relative) for i in found] == [
        ("ctxgraph.nodes.compaction", ("partition",), True),
        ("ctxgraph.nodes.request", ("RequestBuilder",), True),
    ]
    upward = imports_in("from ...graph import builder\n", "ctxgraph.state.sub")
    assert upward_imports("state/sub/x.py", "ctxgraph.state.sub.x", upward) == [
        "state/sub/x.py:1: layer 'state' imports the higher layer 'graph' (ctxgraph.graph)"
    ]


def test_only_module_level_runtime_imports_make_edges() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from ctxgraph.nodes.compaction.partition import repair_tool_pairs\n"
        "if TYPE_CHECKING:\n"
        "    from ctxgraph.nodes.model import ModelNode\n"
        "else:\n"
        "    from ctxgraph.nodes import settings\n"
        "def later():\n"
        "    from ctxgraph.nodes.routing import route_after_model\n"
    )
    imports = {"ctxgraph.nodes.request": imports_in(source, "ctxgraph.nodes")}
    known = [
        "ctxgraph.nodes",
        "ctxgraph.nodes.request",
        "ctxgraph.nodes.compaction",
        "ctxgraph.nodes.compaction.partition",
        "ctxgraph.nodes.model",
        "ctxgraph.nodes.settings",
        "ctxgraph.nodes.routing",
    ]
    edges = runtime_edges(imports, known)
    # The compaction package loads before its submodule; ctxgraph.nodes is already loading.
    assert edges["ctxgraph.nodes.request"] == {
        "ctxgraph.nodes.compaction",
        "ctxgraph.nodes.compaction.partition",
        "ctxgraph.nodes.settings",
    }
    # A type-only import is a dependency too, for a reader and a type checker.
    typed = runtime_edges(imports, known, type_only=True)
    assert typed["ctxgraph.nodes.request"] == {
        *edges["ctxgraph.nodes.request"],
        "ctxgraph.nodes.model",
    }


def test_a_type_only_import_back_closes_a_cycle() -> None:
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from m.record import Ledger\n"
    )
    imports = {"m.block": imports_in(source, "m"), "m.record": imports_in("import m.block\n", "m")}
    assert cycles(runtime_edges(imports)) == []
    assert cycles(runtime_edges(imports, type_only=True)) == [["m.block", "m.record", "m.block"]]


def test_a_cycle_is_found_and_named() -> None:
    edges = {"m.c": {"m.a"}, "m.a": {"m.b"}, "m.b": {"m.c", "m.d"}, "m.d": set()}
    assert cycles(edges) == [["m.a", "m.b", "m.c", "m.a"]]
    assert cycles({"m.a": {"m.b"}, "m.b": {"m.c"}, "m.c": set()}) == []


def test_a_cycle_between_components_is_found_though_modules_have_none() -> None:
    # The request/compaction shape: request uses compaction's parts, compaction's node
    # uses the request builder; no module cycle, one component cycle.
    edges = {
        "ctxgraph.nodes.request": {"ctxgraph.nodes.compaction.render"},
        "ctxgraph.nodes.compaction.render": set(),
        "ctxgraph.nodes.compaction.node": {"ctxgraph.nodes.request"},
    }
    assert cycles(edges) == []
    assert cycles(component_edges(edges)) == [
        ["ctxgraph.nodes.compaction", "ctxgraph.nodes.request", "ctxgraph.nodes.compaction"]
    ]


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("ctxgraph.state.models", "state"),
        ("ctxgraph.graph", "graph"),
        ("ctxgraph", None),
        ("langgraph.graph", None),
    ],
)
def test_layer_of(module: str, layer: str | None) -> None:
    assert layer_of(module) == layer
