"""A LangGraph server's threads as ``AsyncThreadStates``, for a forget run on the server.

Inside a server run no checkpointer is at hand, so :class:`ServerThreadStates` reaches
the threads through the server's own SDK (``langgraph_sdk.get_client()``, in-process:
its calls carry the identity of the run's user, so the server's auth rules still apply).

``rewrite`` reads the thread's state and its whole history (``threads.get_state``,
``threads.get_history``) and counts what the transform finds in every checkpoint's values
and metadata. When something is found it writes the redacted values of the changed
channels with ``threads.update_state`` and then removes the older checkpoints with
``threads.prune([thread_id], strategy="keep_latest")``. Channels are written so that the
stored state equals the transform's output:

- ``messages`` (``add_messages``): the changed messages, which replace theirs by id;
- channels without a reducer: the new value;
- channels with any other reducer (``skill_context``, ``delegations``, ``model_usage``,
  ``tools_unlocked``, ``compaction_retry``): LangGraph's ``Overwrite``, which bypasses
  the reducer (sent in its JSON form ``{"value": ..., "type": "__overwrite__"}``).

The update is made as a node whose only edge leads to END (``extract_memory`` in
ctxgraph's graph, found with ``assistants.get_graph``), so no node is scheduled and the
thread's ``next`` stays empty. A thread with a scheduled node or an interrupt (a run in
progress, interrupted or failed) is refused with ``PendingWritesError``.

The in-memory runtime of ``langgraph dev`` refuses ``keep_latest`` (HTTP 422). There the
thread is deleted and created again under the same id, with its metadata and owner and
the redacted state as its only checkpoint; like the ``InMemorySaver`` fallback this is
not crash-safe and is meant for a runtime that lives in one process.

Limits: the server turns message dicts back into messages with LangChain's
``convert_to_messages``, which keeps an AI message's ``usage_metadata`` and a non-empty
``invalid_tool_calls`` under ``additional_kwargs`` (on the in-memory runtime this holds
for every message of the thread, which is written again whole). A checkpoint's metadata
cannot be written through the SDK: text in the latest checkpoint's metadata is counted,
and the rewrite then fails with ``CheckpointRewriteError``. Subgraph checkpoints are not
listed by ``get_history``; ``prune`` removes the older ones with their root checkpoints.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any, get_args, get_origin, get_type_hints

import httpx
from langchain_core.messages import BaseMessage, messages_from_dict
from langgraph.types import Overwrite
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from ctxgraph.state.graph_state import AgentState
from ctxgraph.store.persistence.checkpoint_rewrite import (
    METADATA_CHANNEL,
    CheckpointRewrite,
    CheckpointRewriteError,
    PendingWritesError,
    Transform,
)

__all__ = ["ServerStatesError", "ServerThreadStates", "reducer_channels"]

MESSAGES = "messages"
"""The channel whose messages are replaced by id."""

MARK_CHANNEL = "compaction"

_END = "__end__"
_START = "__start__"
_PAGE = 100
"""States read per ``get_history`` call."""


class ServerStatesError(RuntimeError):
    """The server's thread cannot be rewritten (no quiet node, no graph id, a failed write)."""


def reducer_channels(schema: type[Any] = AgentState) -> frozenset[str]:
    """The state keys of ``schema`` whose channel has a reducer (``Annotated[T, fn]``)."""
    found: set[str] = set()
    for name, hint in get_type_hints(schema, include_extras=True).items():
        if _has_reducer(hint):
            found.add(name)
    return frozenset(found)


def _has_reducer(hint: Any) -> bool:
    metadata = getattr(hint, "__metadata__", None)
    if metadata is not None:
        return any(inspect.isroutine(item) for item in metadata)
    return any(_has_reducer(arg) for arg in get_args(hint)) if get_origin(hint) else False


_REDUCERS = reducer_channels()


def _decoded(channel: str, value: Any) -> Any:
    """A channel's JSON value as the graph holds it: message dicts become messages."""
    if channel == MESSAGES and isinstance(value, list):
        return [_message(item) for item in value]
    return value


def _message(item: Any) -> Any:
    if isinstance(item, Mapping) and isinstance(item.get("type"), str):
        return messages_from_dict([{"type": item["type"], "data": dict(item)}])[0]
    return item


def _message_json(message: BaseMessage) -> dict[str, Any]:
    """A message as the server's ``add_messages`` turns it back into the same message."""
    data = message.model_dump()
    for key in ("usage_metadata", "invalid_tool_calls"):
        if key in data and not data[key]:
            del data[key]
    return data


def _overwrite(value: Any) -> dict[str, Any]:
    return dataclasses.asdict(Overwrite(value=value))


def _count(transform: Transform, channel: str, value: Any) -> int:
    return transform(channel, _decoded(channel, value))[1]


def _key(channel: str, value: Any) -> str:
    """Identifies one stored copy: a channel's value, as a checkpointer keeps one per version."""
    return channel + "\0" + json.dumps(value, sort_keys=True, default=str)


def _checkpoint_id(state: Mapping[str, Any]) -> str | None:
    checkpoint = state.get("checkpoint") or {}
    value = checkpoint.get("checkpoint_id") if isinstance(checkpoint, Mapping) else None
    return str(value) if value else None


def _values(state: Mapping[str, Any]) -> dict[str, Any]:
    values = state.get("values")
    return dict(values) if isinstance(values, Mapping) else {}


@dataclasses.dataclass
class _Plan:
    result: CheckpointRewrite
    head: Mapping[str, Any]

    @property
    def found(self) -> bool:
        return self.result.total > 0


def _plan(head: Mapping[str, Any], history: Sequence[Mapping[str, Any]], t: Transform) -> _Plan:
    """Count per head channel, and once per distinct channel value in the older ones."""
    head_id = _checkpoint_id(head)
    counts = {ch: _count(t, ch, value) for ch, value in _values(head).items()}
    counts[METADATA_CHANNEL] = _count(t, METADATA_CHANNEL, head.get("metadata") or {})
    seen = {_key(ch, value) for ch, value in _values(head).items()}
    others = [state for state in history if _checkpoint_id(state) != head_id]
    older = sum(_count_older(state, t, seen) for state in others)
    result = CheckpointRewrite(
        head={ch: n for ch, n in counts.items() if n},
        older=older,
        older_checkpoints=len(others),
        rewritten=False,
    )
    return _Plan(result, head)


def _count_older(state: Mapping[str, Any], t: Transform, seen: set[Any]) -> int:
    """Occurrences in an older state's metadata and its channel values not ``seen`` yet."""
    older = _count(t, METADATA_CHANNEL, state.get("metadata") or {})
    for channel, value in _values(state).items():
        key = _key(channel, value)
        if key not in seen:
            seen.add(key)
            older += _count(t, channel, value)
    return older


def _update(channel: str, old: Any, new: Any) -> Any:
    """What to send so that the channel (holding ``old``, decoded) ends up holding ``new``."""
    if channel == MESSAGES and isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            raise ServerStatesError(
                "a transform of the messages must keep their number and order "
                f"({len(old)} became {len(new)})"
            )
        changed = [m for m, was in zip(new, old, strict=True) if m is not was]
        return [_message_json(m) for m in changed if isinstance(m, BaseMessage)]
    if channel in _REDUCERS:
        return _overwrite(new)
    return new


def _plain(channel: str, value: Any) -> Any:
    if channel == MESSAGES and isinstance(value, list):
        return [_message_json(m) if isinstance(m, BaseMessage) else m for m in value]
    return value


class ServerThreadStates:
    """:class:`~ctxgraph.store.forget.thread_copies.AsyncThreadStates` over the SDK."""

    def __init__(
        self, client: LangGraphClient | None = None, *, as_node: str | None = None
    ) -> None:
        """Reach the threads through ``client`` (default: the server's in-process client).

        Args:
            client: An async SDK client; None uses ``langgraph_sdk.get_client()``.
            as_node: The node updates are made as; None finds a node of the thread's
                graph whose only edge leads to END.

        """
        self._client = client
        self._as_node = as_node

    @property
    def client(self) -> LangGraphClient:
        """The SDK client (created on first use)."""
        if self._client is None:
            self._client = get_client()
        return self._client

    async def mark(self, thread_id: str) -> dict[str, Any] | None:
        """The archive mark (``state["compaction"]``) of the thread's latest state.

        Raises ``PendingWritesError`` for a thread with a scheduled node or an interrupt.
        """
        state = await self.client.threads.get_state(thread_id)
        _check_idle(thread_id, state)
        mark = _values(state).get(MARK_CHANNEL)
        return dict(mark) if isinstance(mark, Mapping) else None

    async def rewrite(
        self, thread_id: str, transform: Transform, *, dry_run: bool
    ) -> CheckpointRewrite:
        """Count, and unless ``dry_run`` replace, what ``transform`` finds in every state.

        Args:
            thread_id: The thread (it must be readable by the run's user).
            transform: ``(channel, value) -> (new value, count)``; it is given messages
                as LangChain messages and metadata as ``METADATA_CHANNEL``.
            dry_run: Only count.

        Returns:
            The counts found before the rewrite, and whether the thread changed.

        Raises:
            PendingWritesError: The thread has a scheduled node or an interrupt.
            CheckpointRewriteError: Text remains after the rewrite.
            ServerStatesError: The update could not be made.

        """
        plan = await self._scan(thread_id, transform)
        if dry_run or not plan.found:
            return plan.result
        changes = self._changes(plan.head, transform)
        as_node = await self._node(thread_id) if changes else None
        if changes and as_node is not None:
            await self.client.threads.update_state(thread_id, changes, as_node=as_node)
        await self._prune(thread_id)
        after = await self._scan(thread_id, transform)
        if after.found:
            raise CheckpointRewriteError(
                f"thread {thread_id}: {after.result.total} occurrence(s) remain after the "
                f"rewrite (head channels {sorted(after.result.head)}, "
                f"{after.result.older} in older checkpoints)"
            )
        return dataclasses.replace(plan.result, rewritten=True)

    async def _scan(self, thread_id: str, transform: Transform) -> _Plan:
        state = await self.client.threads.get_state(thread_id)
        _check_idle(thread_id, state)
        return _plan(state, await self._history(thread_id), transform)

    async def _history(self, thread_id: str) -> list[Mapping[str, Any]]:
        states: list[Mapping[str, Any]] = []
        before: Any = None
        while True:
            page = await self.client.threads.get_history(thread_id, limit=_PAGE, before=before)
            states += page
            if len(page) < _PAGE or not page:
                return states
            before = page[-1]["checkpoint"]

    def _changes(self, head: Mapping[str, Any], transform: Transform) -> dict[str, Any]:
        changes: dict[str, Any] = {}
        for channel, value in _values(head).items():
            decoded = _decoded(channel, value)
            new, found = transform(channel, decoded)
            if found:
                changes[channel] = _update(channel, decoded, new)
        return {channel: update for channel, update in changes.items() if update != []}

    async def _node(self, thread_id: str) -> str:
        if self._as_node is not None:
            return self._as_node
        graph_id = await self._graph_id(thread_id)
        drawn = await self.client.assistants.get_graph(graph_id)
        node = quiet_node(drawn)
        if node is None:
            raise ServerStatesError(
                f"graph {graph_id!r} has no node whose only edge leads to END, so an update "
                "would schedule a node: pass ServerThreadStates(as_node=...)"
            )
        return node

    async def _graph_id(self, thread_id: str) -> str:
        thread = await self.client.threads.get(thread_id)
        graph_id = (thread.get("metadata") or {}).get("graph_id")
        if not isinstance(graph_id, str) or not graph_id:
            raise ServerStatesError(f"thread {thread_id} has no graph_id in its metadata")
        return graph_id

    async def _prune(self, thread_id: str) -> None:
        try:
            await self.client.threads.prune([thread_id], strategy="keep_latest")
        except httpx.HTTPStatusError as error:
            if error.response.status_code != 422:
                raise
            await self._recreate(thread_id)

    async def _recreate(self, thread_id: str) -> None:
        """Delete the thread and create it again holding only its latest state."""
        threads = self.client.threads
        thread = await threads.get(thread_id)
        metadata = dict(thread.get("metadata") or {})
        state = await threads.get_state(thread_id)
        values = {ch: _decoded(ch, value) for ch, value in _values(state).items()}
        steps = _recreation_steps(values, await self._node(thread_id))
        await threads.delete(thread_id)
        await threads.create(thread_id=thread_id, metadata=metadata, supersteps=steps)
        owner = metadata.get("owner")
        if owner is not None and _owner(await threads.get(thread_id)) != owner:
            await threads.update(thread_id, metadata={"owner": owner})


def _recreation_steps(values: Mapping[str, Any], node: str | None) -> list[dict[str, Any]]:
    """The supersteps that create a thread holding ``values`` (decoded) as its state."""
    plain = {ch: _plain(ch, value) for ch, value in values.items()}
    steps: list[dict[str, Any]] = [{"updates": [{"values": plain, "as_node": node}]}]
    exact = {ch: _overwrite(v) for ch, v in values.items() if ch in _REDUCERS and ch != MESSAGES}
    if exact:
        steps.append({"updates": [{"values": exact, "as_node": node}]})
    return steps


def _owner(thread: Mapping[str, Any]) -> Any:
    return (thread.get("metadata") or {}).get("owner")


def quiet_node(drawn: Mapping[str, Any]) -> str | None:
    """A node of a drawn graph (``assistants.get_graph``) whose only edge leads to END."""
    edges: dict[str, list[Mapping[str, Any]]] = {}
    for edge in drawn.get("edges") or []:
        edges.setdefault(str(edge.get("source")), []).append(edge)
    for node in drawn.get("nodes") or []:
        name = str(node.get("id"))
        out = edges.get(name, [])
        if name in (_START, _END) or not out:
            continue
        if all(str(e.get("target")) == _END and not e.get("conditional") for e in out):
            return name
    return None


def _check_idle(thread_id: str, state: Mapping[str, Any]) -> None:
    """Refuse a thread with a scheduled node or an interrupt."""
    pending = list(state.get("next") or [])
    tasks = [task for task in state.get("tasks") or [] if task.get("interrupts")]
    if pending or tasks:
        raise PendingWritesError(thread_id, "", max(len(pending), len(tasks)))
