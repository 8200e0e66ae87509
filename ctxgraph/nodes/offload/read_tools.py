"""The ``read_artifact`` and ``grep_artifact`` tools: the model reads offloaded content back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolRuntime

from ctxgraph.nodes.gates import Gate, GatedTool
from ctxgraph.nodes.offload.unlocks import has_artifact
from ctxgraph.state.context import Context
from ctxgraph.state.settings import Settings
from ctxgraph.store.artifacts import ArtifactStore

MAX_RESULT_TOKENS = 4_000
"""The most tokens one result of these tools has (so a result is never offloaded itself)."""

READ_TOOL_NAMES = frozenset({"read_artifact", "grep_artifact"})


def _no_artifact(state: Mapping[str, Any], _settings: Settings) -> str | None:
    if has_artifact(state):
        return None
    return "this thread has no offloaded content yet, so there is no artifact to read"


ARTIFACT_GATE = Gate(when=_no_artifact, stays=True, always_allowed=True)
"""The readers are bound together, once the thread has an artifact, and stay bound."""

READ_DESCRIPTION = (
    "Read offloaded content by its `ref` (art-…) as numbered lines from `offset`; the last "
    "line names the next offset. grep_artifact searches it."
)

GREP_DESCRIPTION = (
    "Search offloaded content (`ref` art-…) with a Python regular expression per line: "
    "matches with their read_artifact offsets and `context` lines around."
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


def read_artifact(
    runtime: ToolRuntime[Context], ref: str, offset: int = 0, limit: int = 200
) -> str:
    """Read an artifact's lines from ``offset``, within ``MAX_RESULT_TOKENS``."""
    page = _artifacts(runtime).read_page(ref, offset, limit, max_tokens=MAX_RESULT_TOKENS)
    return page.text


async def aread_artifact(
    runtime: ToolRuntime[Context], ref: str, offset: int = 0, limit: int = 200
) -> str:
    """Async twin of ``read_artifact``."""
    artifacts = _artifacts(runtime)
    page = await artifacts.aread_page(ref, offset, limit, max_tokens=MAX_RESULT_TOKENS)
    return page.text


def grep_artifact(
    runtime: ToolRuntime[Context],
    ref: str,
    pattern: str,
    max_matches: int = 50,
    context: int = 2,
) -> str:
    """Search an artifact's lines with a regular expression, within ``MAX_RESULT_TOKENS``."""
    return _artifacts(runtime).grep(
        ref, pattern, max_matches=max_matches, context=context, max_tokens=MAX_RESULT_TOKENS
    )


async def agrep_artifact(
    runtime: ToolRuntime[Context],
    ref: str,
    pattern: str,
    max_matches: int = 50,
    context: int = 2,
) -> str:
    """Async twin of ``grep_artifact``."""
    return await _artifacts(runtime).agrep(
        ref, pattern, max_matches=max_matches, context=context, max_tokens=MAX_RESULT_TOKENS
    )


def read_artifact_tool() -> BaseTool:
    """The ``read_artifact`` tool object, to bind to the main model."""
    return GatedTool.from_function(
        func=read_artifact,
        coroutine=aread_artifact,
        name="read_artifact",
        description=READ_DESCRIPTION,
        gate=ARTIFACT_GATE,
    )


def grep_artifact_tool() -> BaseTool:
    """The ``grep_artifact`` tool object, to bind to the main model."""
    return GatedTool.from_function(
        func=grep_artifact,
        coroutine=agrep_artifact,
        name="grep_artifact",
        description=GREP_DESCRIPTION,
        gate=ARTIFACT_GATE,
    )
