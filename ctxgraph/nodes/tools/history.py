"""The ``read_history`` tool: the model reads archived (compacted) messages back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolRuntime

from ctxgraph.nodes.gates import Gate, GatedTool
from ctxgraph.nodes.offload.unlocks import has_archive
from ctxgraph.state.context import Context
from ctxgraph.state.identifiers import extract_identifiers, scalar_strings, shown_verbatim
from ctxgraph.state.sans_io import Flow, arun, io, run
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import count_text
from ctxgraph.state.transcript import transcript
from ctxgraph.store.persistence.archive import (
    TAMPERED,
    ArchiveRecord,
    ThreadArchive,
    committed_version,
    record_messages,
    search_records,
    tampered_versions,
)

MAX_RESULT_TOKENS = 2_000
MAX_MESSAGE_CHARS = 2_000
DESCRIPTION = (
    "Read messages compaction folded out of this conversation: one compaction's by "
    "`version` (the summary names it), or those containing the text `query`."
)


def _archive(runtime: ToolRuntime[Context]) -> ThreadArchive:
    thread_id = (runtime.config.get("configurable") or {}).get("thread_id")
    if runtime.store is None or not isinstance(thread_id, str):
        raise ValueError("this conversation has no archive (no store or thread id)")
    return ThreadArchive(runtime.store, thread_id)


def _mark(runtime: ToolRuntime[Context]) -> Mapping[str, Any] | None:
    """The compaction mark of the graph state the tool runs in: the archive's commit point."""
    state: object = runtime.state
    if isinstance(state, Mapping):
        mark = state.get("compaction")
    else:
        mark = getattr(state, "compaction", None)
    return mark if isinstance(mark, Mapping) else None


def _validate(version: int | None, query: str | None, limit: int) -> int:
    if version is None and not (query and query.strip()):
        raise ValueError("give either version (a compaction number) or a non-empty query")
    if version is not None and version < 1:
        raise ValueError(f"version starts at 1, got {version}")
    return max(1, min(limit, 50))


def _check_committed(version: int, upto: int | None) -> None:
    """Refuse a version above the mark: a prepared leftover is not part of the history."""
    if upto is not None and version > upto:
        raise ValueError(f"there is no archived compaction version {version}")


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


def _by_version(
    record: ArchiveRecord | None, version: int, limit: int, mark: Mapping[str, Any] | None
) -> str:
    if record is None:
        raise ValueError(f"there is no archived compaction version {version}")
    problem = tampered_versions([(version, record)], mark).get(version)
    note = [] if problem is None else [f"note: {TAMPERED} ({problem}); its text may be wrong"]
    try:
        messages = record_messages(record)
    except (KeyError, TypeError, ValueError):
        return _render([f"archive version {version}:", *note, "(its messages cannot be read)"])
    return _render(
        [
            f"archive version {version} ({len(messages)} folded messages):",
            *note,
            *transcript(messages[:limit], max_chars=MAX_MESSAGE_CHARS).splitlines(),
        ]
    )


def _render_found(
    versioned: Sequence[tuple[int, ArchiveRecord]],
    found: Sequence[tuple[int, BaseMessage]],
    mark: Mapping[str, Any] | None,
) -> str:
    """One line per message found, with its version (marked when that record was modified)."""
    modified = tampered_versions(versioned, mark)
    return _render(
        [
            f"v{version}{f' ({TAMPERED})' if version in modified else ''}: "
            + transcript([message], max_chars=MAX_MESSAGE_CHARS)
            for version, message in found
        ]
    )


def mentions(message: BaseMessage, identifier: str) -> bool:
    """Whether ``message`` shows ``identifier`` exactly, in its text or its calls' arguments."""
    if shown_verbatim(identifier, message.text):
        return True
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    return any(shown_verbatim(identifier, s) for c in calls for s in scalar_strings(c["args"]))


def _mentioning(
    versioned: Sequence[tuple[int, ArchiveRecord]], identifier: str
) -> list[tuple[int, BaseMessage]]:
    """The archived messages that mention ``identifier`` exactly, oldest first."""
    found: list[tuple[int, BaseMessage]] = []
    for version, record in versioned:
        try:
            messages = record_messages(record)
        except (KeyError, TypeError, ValueError):
            continue
        found.extend((version, m) for m in messages if mentions(m, identifier))
    return found


def _read(
    runtime: ToolRuntime[Context],
    version: int | None,
    query: str | None,
    limit: int,
) -> Flow[str]:
    """``read_history`` as a flow: the archive read is its one I/O.

    A query that is one identifier alone (an order id, a path) finds the messages that
    name it as a whole token, in their text or their calls' arguments (``A-100`` does not
    find ``A-1001``); any other query runs the archive's text search.
    """
    limit = _validate(version, query, limit)
    archive, mark = _archive(runtime), _mark(runtime)
    upto = committed_version(mark)
    if version is not None:
        _check_committed(version, upto)
        record = yield from io(archive.get, archive.aget, version)
        return _by_version(record, version, limit, mark)
    versioned = yield from io(archive.versioned, archive.aversioned, upto=upto)
    assert query is not None
    text = query.strip()
    if extract_identifiers(text) == [text]:
        found = _mentioning(versioned, text)[:limit]
        missing = f"no archived message mentions {text!r}"
    else:
        found = search_records([record for _, record in versioned], query, limit)
        missing = f"no archived message contains {query!r}"
    return _render_found(versioned, found, mark) if found else missing


def read_history(
    runtime: ToolRuntime[Context],
    version: int | None = None,
    query: str | None = None,
    limit: int = 20,
) -> str:
    """Read archived messages by compaction version, or by text (an id alone exactly)."""
    return run(_read(runtime, version, query, limit))


async def aread_history(
    runtime: ToolRuntime[Context],
    version: int | None = None,
    query: str | None = None,
    limit: int = 20,
) -> str:
    """Async twin of ``read_history``."""
    return await arun(_read(runtime, version, query, limit))


def _no_archive(state: Mapping[str, Any], _settings: Settings) -> str | None:
    if has_archive(state):
        return None
    return "nothing in this thread has been compacted yet, so there is no archive to read"


HISTORY_GATE = Gate(when=_no_archive, stays=True, always_allowed=True)
"""``read_history`` is bound once the thread has an archive, and stays bound."""


def read_history_tool() -> BaseTool:
    """The tool object bound to the main model."""
    return GatedTool.from_function(
        func=read_history,
        coroutine=aread_history,
        name="read_history",
        description=DESCRIPTION,
        gate=HISTORY_GATE,
    )
