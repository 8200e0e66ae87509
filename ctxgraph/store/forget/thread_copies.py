"""The thread side of a forget: archive, artifacts, job results, queue, then checkpoints.

Store copies go first and the checkpoints last, so the mark in the thread state (which
``threads verify`` checks the archive against) changes only after the archive it
describes. A run stopped in between leaves an archive redacted under a receipt and an old
mark; the next forget finds the mark among the redaction's "before" hashes and moves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.store.base import BaseStore

from ctxgraph.state.sans_io import Flow, Io, io
from ctxgraph.store.artifacts.redaction import aredact_artifacts, redact_artifacts
from ctxgraph.store.forget.store_items import aapply, aitem_rewrites, apply, item_rewrites
from ctxgraph.store.persistence.archive import ThreadArchive
from ctxgraph.store.persistence.archive_redaction import (
    ArchiveRedaction,
    aredact_archive,
    redact_archive,
)
from ctxgraph.store.persistence.checkpoint_rewrite import (
    METADATA_CHANNEL,
    CheckpointRewrite,
    PendingWritesError,
    Transform,
    arewrite_thread,
    rewrite_thread,
)
from ctxgraph.store.receipts import Place
from ctxgraph.store.redaction import Redactor

__all__ = [
    "MARK_CHANNEL",
    "AsyncSaverStates",
    "AsyncThreadStates",
    "SaverStates",
    "StatesIo",
    "ThreadStates",
    "thread_flow",
]

MARK_CHANNEL = "compaction"
"""The state channel holding the archive mark (``CompactionMark``)."""

_CHANNEL_KINDS = {
    "messages": "thread window",
    "summary": "summary and ledger",
    "memory_view": "memory view",
    "memory_selection": "memory selection",
    "memory_notes": "memory notes",
    "delegations": "delegation record",
    "skill_context": "active skills",
    METADATA_CHANNEL: "checkpoint metadata",
}


class ThreadStates(Protocol):
    """Where a thread's state lives: read its archive mark, rewrite its checkpoints."""

    def mark(self, thread_id: str) -> dict[str, Any] | None:
        """The archive mark (``state["compaction"]``) of the thread's latest state.

        Raises ``PendingWritesError`` when that state is busy (a run in progress,
        interrupted or failed), before anything of the thread is changed.
        """
        ...

    def rewrite(self, thread_id: str, transform: Transform, *, dry_run: bool) -> CheckpointRewrite:
        """Count, and unless ``dry_run`` replace, what ``transform`` finds in every state."""
        ...


class AsyncThreadStates(Protocol):
    """Async :class:`ThreadStates` (a LangGraph server's threads, an async saver)."""

    async def mark(self, thread_id: str) -> dict[str, Any] | None:
        """The archive mark of the thread's latest state; refuses a busy one."""
        ...

    async def rewrite(
        self, thread_id: str, transform: Transform, *, dry_run: bool
    ) -> CheckpointRewrite:
        """Count, and unless ``dry_run`` replace, what ``transform`` finds in every state."""
        ...


def _head_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _mark_of(thread_id: str, head: CheckpointTuple | None) -> dict[str, Any] | None:
    """The mark in the root head; ``PendingWritesError`` when the head has pending writes."""
    if head is None:
        return None
    if head.pending_writes:
        raise PendingWritesError(thread_id, "", len(head.pending_writes))
    mark = head.checkpoint.get("channel_values", {}).get(MARK_CHANNEL)
    return dict(mark) if isinstance(mark, Mapping) else None


class SaverStates:
    """:class:`ThreadStates` and :class:`AsyncThreadStates` of a checkpointer."""

    def __init__(self, checkpointer: BaseCheckpointSaver[Any]) -> None:
        self.checkpointer = checkpointer

    def mark(self, thread_id: str) -> dict[str, Any] | None:
        """The mark in the latest root checkpoint (refused when it has pending writes)."""
        return _mark_of(thread_id, self.checkpointer.get_tuple(_head_config(thread_id)))

    def rewrite(self, thread_id: str, transform: Transform, *, dry_run: bool) -> CheckpointRewrite:
        """``rewrite_thread`` on the saver."""
        return rewrite_thread(self.checkpointer, thread_id, transform, dry_run=dry_run)


class AsyncSaverStates:
    """:class:`AsyncThreadStates` of an async checkpointer."""

    def __init__(self, checkpointer: BaseCheckpointSaver[Any]) -> None:
        self.checkpointer = checkpointer

    async def mark(self, thread_id: str) -> dict[str, Any] | None:
        """The mark in the latest root checkpoint (refused when it has pending writes)."""
        return _mark_of(thread_id, await self.checkpointer.aget_tuple(_head_config(thread_id)))

    async def rewrite(
        self, thread_id: str, transform: Transform, *, dry_run: bool
    ) -> CheckpointRewrite:
        """``arewrite_thread`` on the saver."""
        return await arewrite_thread(self.checkpointer, thread_id, transform, dry_run=dry_run)


def _healed(mark: dict[str, Any] | None, record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The mark moved onto its record's hashes when an earlier redaction left it behind."""
    if mark is None or record is None:
        return None
    current = (record.get("checksum"), record.get("chain_hash"))
    if (mark.get("checksum"), mark.get("chain_hash")) == current:
        return None
    entries = [*(record.get("redactions") or []), *(record.get("relinked") or [])]
    for entry in entries:
        before = entry.get("before", {}) if isinstance(entry, Mapping) else {}
        if (before.get("checksum"), before.get("chain_hash")) == (
            mark.get("checksum"),
            mark.get("chain_hash"),
        ):
            return {**mark, "checksum": current[0], "chain_hash": current[1]}
    return None


def _transform(redactor: Redactor, mark: dict[str, Any] | None) -> Transform:
    def transform(channel: str, value: Any) -> tuple[Any, int]:
        if channel == MARK_CHANNEL and mark is not None:
            return (mark, 1) if value != mark else (value, 0)
        return redactor.value(value)

    return transform


def _places(
    thread_id: str,
    archive: ArchiveRedaction,
    artifacts: Mapping[str, int],
    items: list[Place],
    checkpoints: CheckpointRewrite,
) -> list[Place]:
    places = [
        Place("archive record", f"thread {thread_id} version {version}", count)
        for version, count in sorted(archive.counts.items())
    ]
    places += [
        Place("artifact", f"thread {thread_id} {ref}", count) for ref, count in artifacts.items()
    ]
    places += items
    for channel, count in checkpoints.head.items():
        if channel != MARK_CHANNEL:
            kind = _CHANNEL_KINDS.get(channel, f"state {channel}")
            places.append(Place(kind, f"thread {thread_id}", count))
    if checkpoints.older:
        where = f"thread {thread_id} ({checkpoints.older_checkpoints} checkpoints)"
        places.append(Place("older checkpoints", where, checkpoints.older))
    return places


@dataclass(frozen=True)
class StatesIo:
    """A flow's thread states: the sync ones (for ``run``) or the async ones (``arun``)."""

    sync: ThreadStates | None = None
    asynchronous: AsyncThreadStates | None = None

    def _sync(self) -> ThreadStates:
        assert self.sync is not None, "the sync driver runs a flow given sync thread states"
        return self.sync

    def _async(self) -> AsyncThreadStates:
        assert self.asynchronous is not None, "the async driver runs a flow given async states"
        return self.asynchronous

    def mark(self, thread_id: str) -> Flow[dict[str, Any] | None]:
        """The thread's archive mark (see ``ThreadStates.mark``)."""
        found = yield Io(
            lambda: self._sync().mark(thread_id), lambda: self._async().mark(thread_id)
        )
        return cast("dict[str, Any] | None", found)

    def rewrite(
        self, thread_id: str, transform: Transform, *, dry_run: bool
    ) -> Flow[CheckpointRewrite]:
        """Rewrite the thread's checkpoints (see ``ThreadStates.rewrite``)."""
        done = yield Io(
            lambda: self._sync().rewrite(thread_id, transform, dry_run=dry_run),
            lambda: self._async().rewrite(thread_id, transform, dry_run=dry_run),
        )
        return cast(CheckpointRewrite, done)


def thread_flow(
    store: BaseStore,
    states: StatesIo,
    thread_id: str,
    redactor: Redactor,
    *,
    receipt_id: str,
    at: str,
    dry_run: bool,
) -> Flow[list[Place]]:
    """Redact every copy of the text in one thread; returns the places it held them.

    A thread with pending writes at its head (a run in progress, interrupted or failed)
    raises ``PendingWritesError`` from ``states.mark``, the first read, so such a thread is
    left exactly as it was.
    """
    mark = yield from states.mark(thread_id)
    archive = yield from io(
        redact_archive,
        aredact_archive,
        store,
        thread_id,
        redactor,
        mark,
        receipt_id=receipt_id,
        at=at,
        dry_run=dry_run,
    )
    new_mark = archive.mark
    if new_mark is None and mark is not None and not dry_run:
        version = mark.get("version")
        record = None
        if _valid(version):
            archive_of = ThreadArchive(store, thread_id)
            record = yield from io(archive_of.get, archive_of.aget, version)
        new_mark = _healed(mark, record)
    artifacts = yield from io(
        redact_artifacts, aredact_artifacts, store, thread_id, redactor.text, dry_run=dry_run
    )
    rewrites = yield from io(item_rewrites, aitem_rewrites, store, thread_id, redactor)
    if not dry_run:
        yield from io(apply, aapply, store, rewrites)
    transform = _transform(redactor, new_mark)
    checkpoints = yield from states.rewrite(thread_id, transform, dry_run=dry_run)
    return _places(
        thread_id, archive, artifacts, [rewrite.place for rewrite in rewrites], checkpoints
    )


def _valid(version: object) -> TypeGuard[int]:
    return isinstance(version, int) and not isinstance(version, bool) and version > 0
