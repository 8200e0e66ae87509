"""Large tool results: stored as thread artifacts and replaced in ``messages`` by a stub."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from ctxgraph.nodes.offload.read_tools import READ_TOOL_NAMES
from ctxgraph.nodes.offload.refs import OFFLOAD_FAILED_KEY, OFFLOAD_KEY, live_refs
from ctxgraph.nodes.offload.stub import offload_stub, unsaved_text
from ctxgraph.nodes.settings import effective_settings
from ctxgraph.state.context import require_context
from ctxgraph.state.messages import content_text
from ctxgraph.state.models import input_window
from ctxgraph.state.sans_io import Flow, arun, io, run, threaded
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter, count_text
from ctxgraph.store.artifacts import Artifact, ArtifactKind, ArtifactStore, ArtifactWriteError
from ctxgraph.store.artifacts.records import REF_PATTERN

logger = logging.getLogger("ctxgraph.offload")

# The shapes of ``ctxgraph.nodes.tools.wrappers``, restated: importing that package here
# would close an import cycle (``nodes.tools`` imports ``nodes.compaction``, which imports
# this package's ``refs``). ``ToolWrapper`` is a protocol, so matching its shape suffices.
ToolResult = ToolMessage | Command[Any]
Execute = Callable[[ToolCallRequest], ToolResult]
AsyncExecute = Callable[[ToolCallRequest], Awaitable[ToolResult]]

RESULT_KIND: ArtifactKind = "tool_result"
"""Artifact kind of a stored tool result."""

NEVER_OFFLOADED = frozenset({*READ_TOOL_NAMES, "read_history"})
"""Tools whose results stay in the conversation whatever their size: they read stored
content back, in pages bounded by their own limits."""

RECENT_REFS = 64
"""Refs written last per thread that eviction keeps, besides the live ones: the results of
parallel calls of one step are stored before any of them is in the state."""

RECENT_THREADS = 1_024
"""Threads whose recently written refs are remembered."""


@dataclass(frozen=True)
class Oversized:
    """A tool result whose text is over its offload threshold."""

    message: ToolMessage
    text: str
    tokens: int
    tool_name: str
    call_id: str
    """The tool call's id: the artifact's source, so a replayed call finds it again."""
    settings: Settings

    @property
    def sha256(self) -> str:
        """SHA-256 hex of the text's UTF-8 bytes."""
        return hashlib.sha256(self.text.encode("utf-8", errors="surrogatepass")).hexdigest()

    @property
    def ref(self) -> str:
        """The ref the result is stored under (known before it is written)."""
        return ArtifactStore.ref_for(RESULT_KIND, self.call_id)

    @property
    def put_args(self) -> dict[str, Any]:
        """The keyword arguments of ``ArtifactStore.put`` besides kind and content."""
        return {"source_id": self.call_id, "tool_name": self.tool_name, "tokens": self.tokens}


def over_threshold(text: str, threshold: int, counter: TokenCounter | None = None) -> int | None:
    """The tokens of ``text`` when there are more than ``threshold`` (> 0), else None.

    Counted with ``counter`` (the graph's), else with ``count_text``. Every cl100k token
    covers at least one UTF-8 byte, so with tiktoken a text of at most ``threshold`` bytes
    is never counted.
    """
    if threshold <= 0:
        return None
    if counter is not None and not counter.tiktoken:
        tokens = counter.count_text(text)
        return tokens if tokens > threshold else None
    if len(text) * 4 <= threshold:
        return None
    if len(text.encode("utf-8", errors="surrogatepass")) <= threshold:
        return None
    tokens = count_text(text)
    return tokens if tokens > threshold else None


def stubbed(item: Oversized, artifact: Artifact) -> ToolMessage:
    """The result with the stub as its content and ``additional_kwargs["offload"]``.

    Id, tool call id, name, status, artifact and the other ``additional_kwargs`` stay.
    """
    extra = {
        **item.message.additional_kwargs,
        OFFLOAD_KEY: {"ref": artifact.ref, "sha256": artifact.sha256, "tokens": item.tokens},
    }
    text = offload_stub(artifact, item.text, tool_name=item.tool_name)
    return _replaced(item.message, text, extra)


def unsaved(item: Oversized, reason: str) -> ToolMessage:
    """The result cut to its head and tail, with a notice that it was not saved and why."""
    logger.warning(
        "the result of tool %s (call %s, %d tokens) was too large to keep and could not be "
        "stored: %s; only its head and tail stay in the conversation",
        item.tool_name,
        item.message.tool_call_id,
        item.tokens,
        reason,
    )
    extra = {
        **item.message.additional_kwargs,
        OFFLOAD_FAILED_KEY: {"sha256": item.sha256, "tokens": item.tokens, "error": reason},
    }
    text = unsaved_text(item.text, tool_name=item.tool_name, tokens=item.tokens, reason=reason)
    return _replaced(item.message, text, extra)


def _replaced(message: ToolMessage, text: str, extra: dict[str, Any]) -> ToolMessage:
    """``message`` with ``text`` as its content; non-text blocks (images, files) stay after it."""
    content: str | list[str | dict[str, Any]] = text
    if not isinstance(message.content, str):
        others = [
            block
            for block in message.content
            if isinstance(block, dict) and block.get("type", "text") != "text"
        ]
        if others:
            content = [{"type": "text", "text": text}, *others]
    return message.model_copy(update={"content": content, "additional_kwargs": extra})


def failure_reason(error: Exception) -> str:
    """``error`` as a notice names it: its type and message, without the unsaved ref."""
    return f"{type(error).__name__}: {REF_PATTERN.sub('(unsaved)', str(error))}"


class ResultOffloader:
    """A ``ToolWrapper``: a result over its threshold becomes an artifact and a stub.

    The threshold is ``Settings.offload_threshold`` of the tool, with the main model's
    input window, under the run's effective settings; tokens are counted exactly (with the
    graph's ``TokenCounter``). The artifact's source is the tool call id, so a replayed
    step finds its artifact again instead of writing a second. When the result cannot be
    stored (no Store, no thread id, a failed write or read-back), it is cut to its head and
    tail with a notice that it was NOT saved; the oversized original never reaches the
    model. Results of the tools that read stored content back (``NEVER_OFFLOADED``) and
    ``Command`` results pass through unchanged.
    """

    def __init__(
        self, main: BaseChatModel, settings: Settings, *, counter: TokenCounter | None = None
    ) -> None:
        """``main`` reports the input window; ``settings`` are the graph's build-time ones.

        ``counter`` is the graph's ``TokenCounter`` (None: tiktoken), so a caller's
        ``token_counter`` decides which results are over their threshold.
        """
        self._main = main
        self._settings = settings
        self._counter = counter
        self._recent: OrderedDict[str, deque[str]] = OrderedDict()
        self._lock = threading.Lock()

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        """Run the tool; store and replace its result when it is too large."""
        return run(self._offload(request, execute(request)))

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        """Async :meth:`wrap` (counting and stubbing run in a thread, off the event loop)."""
        return await arun(self._offload(request, await execute(request)))

    def _offload(self, request: ToolCallRequest, result: ToolResult) -> Flow[ToolResult]:
        """Store and replace ``result`` when it is too large; otherwise ``result``."""
        item = yield from io(self.oversized, threaded(self.oversized), request, result)
        if item is None:
            return result
        artifacts = _artifacts(request, item)
        if isinstance(artifacts, str):
            return unsaved(item, artifacts)
        self._remember(artifacts.thread_id, item.ref)
        try:
            artifact = yield from io(
                artifacts.put, artifacts.aput, RESULT_KIND, item.text, **item.put_args
            )
        except ArtifactWriteError as error:
            return unsaved(item, failure_reason(error))
        keep = self._kept(request, artifacts.thread_id)
        quota = item.settings.artifact_quota_bytes
        if keep is not None:
            try:
                if (yield from io(artifacts.usage_bytes, artifacts.ausage_bytes)) > quota:
                    _log_evicted((yield from io(artifacts.evict, artifacts.aevict, quota, keep)))
            except Exception:  # the result is stored; only the quota is not enforced
                logger.warning("artifact eviction failed; the quota may be exceeded", exc_info=True)
        return (yield from io(stubbed, threaded(stubbed), item, artifact))

    def oversized(self, request: ToolCallRequest, result: ToolResult) -> Oversized | None:
        """``result`` when it is a tool message over its tool's threshold, else None."""
        if not isinstance(result, ToolMessage):
            return None
        tool_name = str(request.tool_call.get("name") or result.name or "")
        if tool_name in NEVER_OFFLOADED:
            return None
        settings = effective_settings(require_context(request.runtime.context), self._settings)
        window = input_window(self._main, settings.context_window)
        text = content_text(result)
        threshold = settings.offload_threshold(tool_name, window)
        tokens = over_threshold(text, threshold, self._counter)
        if tokens is None:
            return None
        call_id = str(request.tool_call.get("id") or result.tool_call_id or "")
        return Oversized(result, text, tokens, tool_name, call_id, settings)

    def _remember(self, thread_id: str, ref: str) -> None:
        """Note ``ref`` as written in ``thread_id``, before writing it.

        Parallel calls of one step store their results before any of them is in the
        state; an eviction by one of them keeps the others' (see ``_kept``).
        """
        with self._lock:
            recent = self._recent.setdefault(thread_id, deque(maxlen=RECENT_REFS))
            self._recent.move_to_end(thread_id)
            if ref not in recent:
                recent.append(ref)
            while len(self._recent) > RECENT_THREADS:
                self._recent.popitem(last=False)

    def _kept(self, request: ToolCallRequest, thread_id: str) -> set[str] | None:
        """Refs eviction must keep: the live ones and the thread's recent writes.

        None when the state cannot be read, so nothing is evicted.
        """
        with self._lock:
            recent = set(self._recent.get(thread_id) or ())
        state = request.state
        if not isinstance(state, Mapping):
            logger.warning("the tools node's state is not a mapping; artifacts are not evicted")
            return None
        return live_refs(state) | recent


def _artifacts(request: ToolCallRequest, item: Oversized) -> ArtifactStore | str:
    """The thread's artifact store, or why there is none."""
    runtime = request.runtime
    configurable = (runtime.config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if runtime.store is None:
        return "no store: the graph runs without a LangGraph Store to keep artifacts in"
    if not isinstance(thread_id, str) or not thread_id:
        return "no thread id: the run's config has no configurable thread_id"
    if not item.call_id:
        return "no tool call id to store the result under"
    try:
        return ArtifactStore(runtime.store, thread_id)
    except ValueError as error:  # a thread id that cannot name a Store namespace
        return failure_reason(error)


def _log_evicted(refs: list[str]) -> None:
    if refs:
        logger.info("evicted %d artifact(s) over the quota: %s", len(refs), ", ".join(refs))
