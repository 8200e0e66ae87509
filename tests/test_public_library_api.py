"""The package uses only public LangGraph/LangChain names and no private attribute of others."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.support.cli import REPO_ROOT

PACKAGES = ("graph", "nodes", "state", "store")
LIBRARIES = ("langgraph", "langchain")


def _private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def _is_library(module: str) -> bool:
    return module.split(".")[0].startswith(LIBRARIES)


def private_uses(source: str) -> Iterator[tuple[int, str]]:
    """Line and text of each private library import or private attribute of another object.

    ``self._x`` and ``cls._x`` are the class's own business; an attribute of an imported
    module counts only for LangGraph and LangChain modules.
    """
    tree = ast.parse(source)
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name.split(".")[0]] = alias.name
                if _is_library(alias.name) and _private(alias.name):
                    yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.ImportFrom) and node.module and _is_library(node.module):
            names = [node.module, *(alias.name for alias in node.names)]
            if any(_private(name) for name in names):
                yield node.lineno, ast.unparse(node)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        base = node.value
        if isinstance(base, ast.Name):
            if base.id in ("self", "cls"):
                continue
            if base.id in modules and not _is_library(modules[base.id]):
                continue
        yield node.lineno, ast.unparse(node)


def test_no_private_library_api_in_the_package() -> None:
    paths = [path for package in PACKAGES for path in sorted((REPO_ROOT / package).rglob("*.py"))]
    assert len(paths) > len(PACKAGES), "the scan found no source files"
    found = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {text}"
        for path in paths
        for line, text in private_uses(path.read_text(encoding="utf-8"))
    ]
    assert not found, "private LangGraph/LangChain API or private attributes used:\n" + "\n".join(
        found
    )


def test_the_scan_finds_private_imports_and_attributes() -> None:
    source = "\n".join(
        [
            "import argparse",
            "import langgraph._internal._constants",
            "from langgraph._internal._runnable import RunnableCallable",
            "from langgraph.pregel import _loop",
            "from langgraph.graph import START",
            "store._cursor()",
            "self._cursor()",
            "argparse._SubParsersAction",
        ]
    )
    assert [line for line, _ in private_uses(source)] == [2, 3, 4, 6]
