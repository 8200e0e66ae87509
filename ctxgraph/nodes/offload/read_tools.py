"""The ``read_artifact`` and ``grep_artifact`` tools: the model reads offloaded content back."""

from __future__ import annotations

from typing import Annotated

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolRuntime

from ctxgraph.state.context import Context
from ctxgraph.store.artifacts import ArtifactStore
from ctxgraph.store.artifacts.paging import MAX_LIMIT

MAX_RESULT_TOKENS = 4_000
"""The most tokens one result of these tools has (so a result is never offloaded itself)."""

READ_TOOL_NAMES = frozenset({"read_artifact", "grep_artifact"})

REF_HELP = (
    "The artifact's ref, exactly as shown where the content was offloaded: 'art-' and 24 "
    "hex digits, e.g. art-0123456789abcdef01234567."
)

READ_DESCRIPTION = (
    "Read an artifact (content moved out of this conversation; its ref looks like "
    f"art-…) as numbered lines from `offset`, at most `limit` lines (1-{MAX_LIMIT}). The "
    "last line gives the exact next offset. Use grep_artifact to find something first."
)

GREP_DESCRIPTION = (
    "Search an artifact with a Python regular expression per line; returns matching "
    "lines with their read_artifact offsets and `context` lines around them."
)


def _artifacts(runtime: ToolRuntime[Context]) -> ArtifactStore:
    if runtime.store is None:
        raise ValueError(
            "artifacts cannot be read: the graph runs without a LangGraph Store "
            "(compile it with store=... or run it on a LangGraph server)"
        )
    thread_id = (runtime.config.get("configurable") or {}).get("thread_id")
    if not isinstance(thread_id, str) or not thread_id:
        raise ValueError(
            "artifacts cannot be read: the run has no thread id "
            '(pass config={"configurable": {"thread_id": ...}})'
        )
    return ArtifactStore(runtime.store, thread_id)


Ref = Annotated[str, REF_HELP]
Offset = Annotated[int, "0-based line offset to start at: 0, or the next offset a page named."]
Limit = Annotated[int, f"How many lines to show, 1-{MAX_LIMIT}; the token cap may stop earlier."]
Pattern = Annotated[str, "A Python regular expression, matched against each line (re.search)."]
MaxMatches = Annotated[int, "How many matching lines to show at most (1-500)."]
ContextLines = Annotated[int, "Lines to show before and after each match (0-20)."]


def read_artifact(
    runtime: ToolRuntime[Context], ref: Ref, offset: Offset = 0, limit: Limit = 200
) -> str:
    """Read an artifact's lines from ``offset``, within ``MAX_RESULT_TOKENS``."""
    page = _artifacts(runtime).read_page(ref, offset, limit, max_tokens=MAX_RESULT_TOKENS)
    return page.text


async def aread_artifact(
    runtime: ToolRuntime[Context], ref: Ref, offset: Offset = 0, limit: Limit = 200
) -> str:
    """Async twin of ``read_artifact``."""
    artifacts = _artifacts(runtime)
    page = await artifacts.aread_page(ref, offset, limit, max_tokens=MAX_RESULT_TOKENS)
    return page.text


def grep_artifact(
    runtime: ToolRuntime[Context],
    ref: Ref,
    pattern: Pattern,
    max_matches: MaxMatches = 50,
    context: ContextLines = 2,
) -> str:
    """Search an artifact's lines with a regular expression, within ``MAX_RESULT_TOKENS``."""
    return _artifacts(runtime).grep(
        ref, pattern, max_matches=max_matches, context=context, max_tokens=MAX_RESULT_TOKENS
    )


async def agrep_artifact(
    runtime: ToolRuntime[Context],
    ref: Ref,
    pattern: Pattern,
    max_matches: MaxMatches = 50,
    context: ContextLines = 2,
) -> str:
    """Async twin of ``grep_artifact``."""
    return await _artifacts(runtime).agrep(
        ref, pattern, max_matches=max_matches, context=context, max_tokens=MAX_RESULT_TOKENS
    )


def read_artifact_tool() -> BaseTool:
    """The ``read_artifact`` tool object, to bind to the main model."""
    return StructuredTool.from_function(
        func=read_artifact,
        coroutine=aread_artifact,
        name="read_artifact",
        description=READ_DESCRIPTION,
    )


def grep_artifact_tool() -> BaseTool:
    """The ``grep_artifact`` tool object, to bind to the main model."""
    return StructuredTool.from_function(
        func=grep_artifact,
        coroutine=agrep_artifact,
        name="grep_artifact",
        description=GREP_DESCRIPTION,
    )
