"""Compare-and-set commit: a compaction prepares its archive version only on an unmoved thread."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from ctxgraph.nodes.compaction.audit import MAX_THREADS, ArchiveAudit
from ctxgraph.store.persistence.archive import (
    TAMPERED,
    ArchiveRecord,
    ThreadArchive,
    committed_version,
    tampered_versions,
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


MISSING = "is missing from the archive"
"""In the warning about a committed version the Store no longer holds."""


class ArchiveCheck(ArchiveAudit):
    """The archive check at the start of every compaction: cheap, and warns once per finding.

    The first compaction of a thread in this graph object checks every committed version
    (one Store listing, as :class:`ArchiveAudit` does) and also names the versions missing
    from 1 up to the mark. Every later compaction reads one record, the version the mark
    names, and checks it against its own hashes and the mark (``checksum``, ``cursor``,
    ``chain_hash``); the full chain is left to ``ctxgraph threads verify``. Findings are
    warnings on ``ctxgraph.compaction`` (the command line prints them as ``warning: ...``);
    the same finding is not repeated for a thread.
    """

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        super().__init__(max_threads)
        self._warned: OrderedDict[str, set[tuple[int, str]]] = OrderedDict()
        self._max_warned = max_threads

    def check(self, archive: ThreadArchive, mark: Mapping[str, Any] | None) -> None:
        """Check the thread's archive against ``mark`` (the state the compaction starts from)."""
        upto = committed_version(mark)
        if not upto:
            return
        if self._pending(archive.thread_id, mark) is not None:
            versioned = archive.versioned(upto=upto)
            self._missing(archive.thread_id, [v for v, _ in versioned], upto)
            self._report(archive.thread_id, versioned, mark, upto)
            return
        self._latest(archive.thread_id, upto, archive.get(upto), mark)

    async def acheck(self, archive: ThreadArchive, mark: Mapping[str, Any] | None) -> None:
        """Async :meth:`check`."""
        upto = committed_version(mark)
        if not upto:
            return
        if self._pending(archive.thread_id, mark) is not None:
            versioned = await archive.aversioned(upto=upto)
            self._missing(archive.thread_id, [v for v, _ in versioned], upto)
            self._report(archive.thread_id, versioned, mark, upto)
            return
        self._latest(archive.thread_id, upto, await archive.aget(upto), mark)

    def _missing(self, thread_id: str, present: Sequence[int], upto: int) -> None:
        found = set(present)
        for version in range(1, upto + 1):
            if version not in found:
                self._warn_missing(thread_id, version, upto)

    def _latest(
        self,
        thread_id: str,
        version: int,
        record: ArchiveRecord | None,
        mark: Mapping[str, Any] | None,
    ) -> None:
        if record is None:
            self._warn_missing(thread_id, version, version)
            return
        reason = tampered_versions([(version, record)], mark).get(version)
        if reason is not None and self._first(thread_id, version, reason):
            logger.warning(
                "archive version %d of thread %s: %s (%s); `ctxgraph threads verify %s` "
                "checks the whole chain",
                version,
                thread_id,
                TAMPERED,
                reason,
                thread_id,
            )

    def _warn_missing(self, thread_id: str, version: int, upto: int) -> None:
        if not self._first(thread_id, version, MISSING):
            return
        logger.warning(
            "archive version %d of thread %s %s: the thread state's mark is at v%d, so the "
            "messages it folded cannot be read back (deleted from the Store?); "
            "`ctxgraph threads verify %s` checks the whole chain",
            version,
            thread_id,
            MISSING,
            upto,
            thread_id,
        )

    def _first(self, thread_id: str, version: int, reason: str) -> bool:
        """Whether ``reason`` about ``version`` is new for the thread (and remember it)."""
        seen = self._warned.setdefault(thread_id, set())
        self._warned.move_to_end(thread_id)
        while len(self._warned) > self._max_warned:
            self._warned.popitem(last=False)
        if (version, reason) in seen:
            return False
        seen.add((version, reason))
        return True


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
        self.audit: ArchiveAudit = ArchiveCheck()

    def prepare(
        self,
        archive: ThreadArchive,
        record: ArchiveRecord,
        folded: Sequence[BaseMessage],
        window: Sequence[BaseMessage],
        config: RunnableConfig,
    ) -> bool:
        """Archive ``record`` as a prepared version; False (nothing written) if moved."""
        if self._head is not None:
            head = self._head.read(archive.thread_id, graph_namespace(config))
            if self._discard(archive, record, head, folded, window):
                return False
        archive.put(record, committed_version=record["version"] - 1)
        self.audit.wrote(archive.thread_id, record["version"])
        return True

    async def aprepare(
        self,
        archive: ThreadArchive,
        record: ArchiveRecord,
        folded: Sequence[BaseMessage],
        window: Sequence[BaseMessage],
        config: RunnableConfig,
    ) -> bool:
        """Async :meth:`prepare`."""
        if self._head is not None:
            head = await self._head.aread(archive.thread_id, graph_namespace(config))
            if self._discard(archive, record, head, folded, window):
                return False
        await archive.aput(record, committed_version=record["version"] - 1)
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
