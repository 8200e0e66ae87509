"""Compare-and-set commit: a compaction prepares its archive version only on an unmoved thread."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from ctxgraph.nodes.compaction.audit import ArchiveAudit
from ctxgraph.state.sans_io import Flow, io
from ctxgraph.store.persistence.archive import (
    ArchiveRecord,
    ThreadArchive,
    committed_version,
)

logger = logging.getLogger("ctxgraph.compaction")

NS_SEP = "|"
"""Separates the levels of a LangGraph checkpoint namespace (``parent:task|node:task``)."""


@dataclass(frozen=True)
class Head:
    """The thread's latest saved checkpoint, as far as compaction cares."""

    mark_version: int
    """The committed compaction version of that checkpoint's mark (0 before any)."""
    window_ids: tuple[str, ...]
    """Ids of that checkpoint's working window, in order."""


class ThreadHead(Protocol):
    """Reads the latest committed state of a thread (``checkpoint_ns`` "" for a root graph)."""

    def read(self, thread_id: str, checkpoint_ns: str) -> Head | None:
        """The head, or None when the thread has no saved checkpoint yet."""
        ...

    async def aread(self, thread_id: str, checkpoint_ns: str) -> Head | None:
        """Async :meth:`read`."""
        ...


class CheckpointHead:
    """A ``ThreadHead`` that reads a checkpointer's latest checkpoint of the thread."""

    def __init__(self, checkpointer: BaseCheckpointSaver[Any]) -> None:
        self._checkpointer = checkpointer

    def read(self, thread_id: str, checkpoint_ns: str) -> Head | None:
        """The head of ``thread_id`` through ``checkpointer.get_tuple``."""
        return head_of(self._checkpointer.get_tuple(_head_config(thread_id, checkpoint_ns)))

    async def aread(self, thread_id: str, checkpoint_ns: str) -> Head | None:
        """The head of ``thread_id`` through ``checkpointer.aget_tuple``."""
        saved = await self._checkpointer.aget_tuple(_head_config(thread_id, checkpoint_ns))
        return head_of(saved)


def checkpoint_head(checkpointer: BaseCheckpointSaver[Any] | None) -> ThreadHead | None:
    """The compare-and-set reader for a graph compiled with ``checkpointer`` (None: none)."""
    return None if checkpointer is None else CheckpointHead(checkpointer)


def _head_config(thread_id: str, checkpoint_ns: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}}


def head_of(saved: CheckpointTuple | None) -> Head | None:
    """The mark version and window ids of a saved checkpoint."""
    if saved is None:
        return None
    values: Mapping[str, Any] = saved.checkpoint.get("channel_values") or {}
    mark = values.get("compaction")
    version = committed_version(mark if isinstance(mark, Mapping) else None)
    messages = values.get("messages") or []
    ids = tuple(str(m.id) for m in messages if isinstance(m, BaseMessage) and m.id)
    return Head(mark_version=version or 0, window_ids=ids)


def graph_namespace(config: RunnableConfig) -> str:
    """The checkpoint namespace of the graph a node runs in, from the node's own config.

    A node's config names its task (``compact:<task id>``, under its parents' levels); the
    graph's checkpoints are saved one level up ("" for a root graph).
    """
    task_ns = str((config.get("configurable") or {}).get("checkpoint_ns") or "")
    return task_ns.rpartition(NS_SEP)[0]


def moved(
    head: Head | None, mark_version: int, folded: Sequence[str], window: Sequence[str]
) -> str | None:
    """Why the thread's head no longer holds the window a compaction folded, or None.

    ``mark_version`` is the mark the compaction started from, ``folded`` the ids it folds
    and ``window`` the ids of the whole window it saw. The head moved when another run
    committed a later compaction, or when a folded message left the thread's window. A
    head *behind* this run's state (a lower mark, or a window this one merely extends) is
    this run's own progress not yet saved, as with ``durability="async"`` or ``"exit"``.
    """
    if head is None or head.mark_version < mark_version:
        return None
    if head.mark_version > mark_version:
        return f"another run committed compaction v{head.mark_version} meanwhile"
    present = set(head.window_ids)
    missing = [message_id for message_id in folded if message_id not in present]
    if not missing or tuple(window[: len(head.window_ids)]) == head.window_ids:
        return None
    return (
        f"{len(missing)} of the {len(folded)} folded messages are no longer in the thread's window"
    )


class CompactionCommit:
    """Writes a compaction's prepared archive version, unless the thread moved on.

    The checkpoint LangGraph saves after the node is the commit: the archive version is
    *prepared* until the thread state's mark reaches it. With a ``head``, the node first
    compares the mark it started from and the ids it folds with the thread's latest saved
    checkpoint (compare-and-set); without one (a graph whose checkpointer a server
    injects), that check is left to the server's one-run-per-thread serialization.
    """

    def __init__(self, head: ThreadHead | None = None) -> None:
        self._head = head
        self.audit = ArchiveAudit()

    def prepare(
        self,
        archive: ThreadArchive,
        record: ArchiveRecord,
        folded: Sequence[BaseMessage],
        window: Sequence[BaseMessage],
        config: RunnableConfig,
    ) -> Flow[bool]:
        """Archive ``record`` as a prepared version; False (nothing written) if moved.

        A flow (``ctxgraph.state.sans_io``): ``run`` or ``arun`` it, or ``yield from`` it.
        """
        if self._head is not None:
            where = archive.thread_id, graph_namespace(config)
            head = yield from io(self._head.read, self._head.aread, *where)
            if self._discard(archive, record, head, folded, window):
                return False
        committed = record["version"] - 1
        yield from io(archive.put, archive.aput, record, committed_version=committed)
        self.audit.wrote(archive.thread_id, record["version"])
        return True

    @staticmethod
    def _discard(
        archive: ThreadArchive,
        record: ArchiveRecord,
        head: Head | None,
        folded: Sequence[BaseMessage],
        window: Sequence[BaseMessage],
    ) -> bool:
        started = record["version"] - 1
        reason = moved(head, started, _ids(folded), _ids(window))
        if reason is None or head is None:
            return False
        logger.warning(
            "compaction of thread %s discarded, nothing written: the thread moved on while it "
            "ran (%s; its committed mark is v%d, this compaction started from v%d and would "
            "have committed v%d)",
            archive.thread_id,
            reason,
            head.mark_version,
            started,
            record["version"],
        )
        return True


def _ids(messages: Sequence[BaseMessage]) -> list[str]:
    return [str(message.id) for message in messages if message.id]
