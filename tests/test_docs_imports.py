"""The docs import only from ``ctxgraph`` and the public modules the design names.

Every Python block of the docs (run or not) is parsed; an import of a deeper module would
make an internal move a breaking change for whoever copied the example, so it fails here
with the block's page and line.
"""

from __future__ import annotations

import ast

from tests.test_docs_examples import ALL_BLOCKS, Block

PUBLIC = frozenset(
    {
        "ctxgraph",
        "ctxgraph.graph",
        "ctxgraph.graph.auth",
        "ctxgraph.state",
        "ctxgraph.state.summary",
        "ctxgraph.store.persistence",
        "ctxgraph.store.memory",
        "ctxgraph.store.search",
        "ctxgraph.nodes.compaction",
        "ctxgraph.nodes.memory",
        "ctxgraph.middleware",
    }
)
"""The modules examples may import from (the public API of the design's section 7)."""


def imported_modules(code: str) -> list[str]:
    """The ``ctxgraph`` modules ``code`` imports from."""
    found: list[str] = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [name for name in found if name == "ctxgraph" or name.startswith("ctxgraph.")]


def deep_imports(blocks: list[Block]) -> list[str]:
    """``page:line module`` for every import of a module outside ``PUBLIC``."""
    return [
        f"{block.where} {module}"
        for block in blocks
        if block.language == "python"
        for module in imported_modules(block.code)
        if module not in PUBLIC
    ]


def test_docs_import_only_public_modules() -> None:
    assert not deep_imports(ALL_BLOCKS), "\n".join(deep_imports(ALL_BLOCKS))


def test_a_deep_import_is_reported() -> None:
    code = "from ctxgraph.nodes.tools.wrappers import ToolWrapper\nfrom ctxgraph import Part\n"
    assert imported_modules(code) == ["ctxgraph.nodes.tools.wrappers", "ctxgraph"]
