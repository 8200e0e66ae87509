"""The ``read_history`` tool: the model reads archived (compacted) messages back."""

from __future__ import annotations

from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolRuntime

from ctxgraph.nodes.compaction.summarizer import transcript
from ctxgraph.state.context import Context
from ctxgraph.state.tokens import count_text
from ctxgraph.store.persistence.archive import ArchiveRecord, ThreadArchive, record_messages

MAX_RESULT_TOKENS = 2_000
MAX_MESSAGE_CHARS = 2_000
DESCRIPTION = (
    "Read messages that were folded out of this conversation by compaction. Give "
    "`version` (shown in the conversation summary) to read that compaction's messages, or "
    "`query` to find archived messages containing the text. Returns a transcript."
)


def _archive(runtime: ToolRuntime[Context]) -> ThreadArchive:
    thread_id = (runtime.config.get("configurable") or {}).get("thread_id")
    if runtime.store is None or not isinstance(thread_id, str):
        raise ValueError("this conversation has no archive (no store or thread id)")
    return ThreadArchive(runtime.store, thread_id)


def _validate(version: int | None, query: str | None, limit: int) -> int:
    if version is None and not (query and query.strip()):
        raise ValueError("give either version (a compaction number) or a non-empty query")
    if version is not None and version < 1:
        raise ValueError(f"version starts at 1, got {version}")
    return max(1, min(limit, 50))


def _render(lines: list[str]) -> str:
    shown: list[str] = []
    used = 0
    for line in lines:
        size = count_text(line)
        if used + size > MAX_RESULT_TOKENS:
            shown.append(f"[... {len(lines) - len(shown)} more; narrow the query ...]")
            break
        shown.append(line)
        used += size
    return "\n".join(shown)


def _by_version(record: ArchiveRecord | None, version: int, limit: int) -> str:
    if record is None:
        raise ValueError(f"there is no archived compaction version {version}")
    messages = record_messages(record)[:limit]
    return _render(
        [
            f"archive version {version} ({len(record['messages'])} folded messages):",
            *transcript(messages, max_chars=MAX_MESSAGE_CHARS).splitlines(),
        ]
    )


def _by_query(found: list[tuple[int, BaseMessage]], query: str) -> str:
    if not found:
        return f"no archived message contains {query!r}"
    return _render(
        [f"v{version}: {transcript([m], max_chars=MAX_MESSAGE_CHARS)}" for version, m in found]
    )


def read_history(
    runtime: ToolRuntime[Context],
    version: int | None = None,
    query: str | None = None,
    limit: int = 20,
) -> str:
    """Read archived messages by compaction version or by text."""
    limit = _validate(version, query, limit)
    archive = _archive(runtime)
    if version is not None:
        return _by_version(archive.get(version), version, limit)
    assert query is not None
    return _by_query(archive.search_messages(query, limit), query)


async def aread_history(
    runtime: ToolRuntime[Context],
    version: int | None = None,
    query: str | None = None,
    limit: int = 20,
) -> str:
    """Async twin of ``read_history``."""
    limit = _validate(version, query, limit)
    archive = _archive(runtime)
    if version is not None:
        return _by_version(await archive.aget(version), version, limit)
    assert query is not None
    return _by_query(await archive.asearch_messages(query, limit), query)


def read_history_tool() -> BaseTool:
    """The tool object bound to the main model."""
    return StructuredTool.from_function(
        func=read_history,
        coroutine=aread_history,
        name="read_history",
        description=DESCRIPTION,
    )
