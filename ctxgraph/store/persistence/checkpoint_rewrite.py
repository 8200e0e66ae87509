"""Removing forgotten text from a thread's checkpoints, the older ones included.

LangGraph keeps every checkpoint of a thread, so text removed from the thread's state
still sits in the checkpoints before it (``get_state_history`` and time travel read
them), in their pending writes and in their metadata. ``rewrite_thread`` (and
``arewrite_thread``) scans all of them, in every checkpoint namespace, with a
``Transform`` that replaces the text in a channel's value and counts what it replaced.
When something is found it writes a new head, the latest checkpoint with every channel
value transformed, then prunes the rest with the saver's public
``prune([thread_id], strategy="keep_latest")``.

Afterwards the thread holds one checkpoint per namespace: the redacted head (metadata
``source="update"``, ``ctxgraph_redaction=True``). The next run continues from it as from
any head: channel versions and the versions each node has seen are carried over, so no
node re-runs. Time travel keeps only that head: the checkpoints before it, their pending
writes and the subgraph-call namespaces that started from them are gone, and replaying
or forking from an older checkpoint id no longer finds it.

On Postgres nothing is lost if the process dies between the steps: the new head is
written before anything is deleted, and running the rewrite again finishes the prune.
A saver without ``prune`` (``InMemorySaver``) is rewritten by reading everything,
deleting the thread and writing the new heads alone; that fallback is not crash-safe and
is meant for savers that live in the process.

A head with pending writes (a run in progress, interrupted, or failed) is refused with
``PendingWritesError``, a ``ThreadBusyError``; callers hold the thread lock, so a normal
run cannot start meanwhile.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    copy_checkpoint,
)
from langgraph.checkpoint.base.id import uuid6

from ctxgraph.state.sans_io import Flow, arun, io, run
from ctxgraph.store.persistence.thread_lock import ThreadBusyError

__all__ = [
    "METADATA_CHANNEL",
    "CheckpointRewrite",
    "CheckpointRewriteError",
    "PendingWritesError",
    "RewriteOptions",
    "ThreadBusyError",
    "Transform",
    "arewrite_thread",
    "rewrite_thread",
]

Transform = Callable[[str, Any], tuple[Any, int]]
"""``(channel name, value) -> (new value, occurrences replaced)``; must not mutate ``value``."""

METADATA_CHANNEL = "__metadata__"
"""The channel name a ``Transform`` is given for a checkpoint's metadata."""

REDACTION_KEY = "ctxgraph_redaction"
"""Metadata key set to True on a head this module wrote."""

_CALL_MARK = ":"
"""In a namespace, marks a subgraph call (deleted with its root checkpoint by ``prune``)."""


@dataclass(frozen=True)
class CheckpointRewrite:
    """What ``rewrite_thread`` found in a thread's checkpoints and whether it changed them.

    Occurrences are counted once per stored copy: a channel value that several
    checkpoints share (one channel version) counts once.

    Attributes:
        head: channel name -> occurrences in the latest root checkpoint (what the thread
            is now); channels without any are left out, metadata is ``METADATA_CHANNEL``.
        older: occurrences in every other checkpoint, pending write and subgraph
            namespace.
        older_checkpoints: how many checkpoints besides the root head existed (all
            namespaces); ``rewrite_thread`` removes them unless nothing was found.
        rewritten: the checkpoints were changed: a new head was written where a head
            held the text, and the rest was pruned.

    """

    head: dict[str, int]
    older: int
    older_checkpoints: int
    rewritten: bool

    @property
    def total(self) -> int:
        """All occurrences found, head and older checkpoints together."""
        return sum(self.head.values()) + self.older


class PendingWritesError(ThreadBusyError):
    """The thread's latest checkpoint has pending writes: a run is in progress or stopped.

    Attributes:
        thread_id: the thread refused.
        namespace: the checkpoint namespace whose head has the writes ("" is the root).
        pending: how many pending writes that head has.

    """

    def __init__(self, thread_id: str, namespace: str, pending: int) -> None:
        self.thread_id = thread_id
        self.waited = 0.0
        self.namespace = namespace
        self.pending = pending
        where = f" in checkpoint namespace {namespace!r}" if namespace else ""
        RuntimeError.__init__(
            self,
            f"thread {thread_id} is busy: its latest checkpoint{where} has {pending} pending "
            "write(s) (a run is in progress, interrupted or failed); resume or finish the "
            "run, then try again",
        )


class RewriteOptions(TypedDict, total=False):
    """What :func:`rewrite_thread` and :func:`arewrite_thread` take by keyword."""

    dry_run: bool
    """Only count; change nothing (default False)."""
    prune_always: bool
    """Prune the older checkpoints even when nothing was found (default False)."""


class CheckpointRewriteError(RuntimeError):
    """Text was still found in the thread's checkpoints after the rewrite."""


@dataclass
class _Plan:
    """The sans-I/O result of scanning a thread: counts and the heads to write."""

    result: CheckpointRewrite
    heads: dict[str, CheckpointTuple] = field(default_factory=dict)
    """Namespace -> latest checkpoint, for the namespaces that ``prune`` keeps."""
    dirty: list[str] = field(default_factory=list)
    """Namespaces whose head holds the text and gets a new head."""

    @property
    def found(self) -> bool:
        return self.result.total > 0


@dataclass(frozen=True)
class _NewHead:
    """A redacted head ready for ``put``."""

    namespace: str
    parent: RunnableConfig
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    changed: dict[str, str | int | float]
    """Channel -> new version, for the channels whose value changed."""


def _thread_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def _namespace(saved: CheckpointTuple) -> str:
    return str(saved.config["configurable"].get("checkpoint_ns") or "")


def _checkpoint_id(saved: CheckpointTuple) -> str:
    return str(saved.config["configurable"]["checkpoint_id"])


def _kept_by_prune(namespace: str) -> bool:
    """The root and ``checkpointer=True`` subgraphs keep their latest checkpoint."""
    return _CALL_MARK not in namespace


def _latest(saved: Iterable[CheckpointTuple]) -> dict[str, CheckpointTuple]:
    heads: dict[str, CheckpointTuple] = {}
    for item in saved:
        namespace = _namespace(item)
        if namespace not in heads or _checkpoint_id(item) > _checkpoint_id(heads[namespace]):
            heads[namespace] = item
    return heads


def _plan(thread_id: str, saved: Sequence[CheckpointTuple], transform: Transform) -> _Plan:
    """Count the occurrences in every checkpoint; refuse a head with pending writes."""
    latest = _latest(saved)
    heads = {ns: item for ns, item in latest.items() if _kept_by_prune(ns)}
    for namespace, item in heads.items():
        if item.pending_writes:
            raise PendingWritesError(thread_id, namespace, len(item.pending_writes))
    counted: set[tuple[str, str, object]] = set()
    head_counts, older, dirty = _head_counts(heads, transform, counted)
    older += _older_counts(saved, heads, transform, counted)
    result = CheckpointRewrite(
        head=head_counts,
        older=older,
        older_checkpoints=len(saved) - (1 if "" in heads else 0),
        rewritten=False,
    )
    return _Plan(result, heads, dirty)


def _head_counts(
    heads: dict[str, CheckpointTuple],
    transform: Transform,
    counted: set[tuple[str, str, object]],
) -> tuple[dict[str, int], int, list[str]]:
    """The root head's counts by channel, the other heads' total, and the dirty heads."""
    head_counts: dict[str, int] = {}
    older = 0
    dirty: list[str] = []
    for namespace, item in heads.items():
        found = _count_values(namespace, item, transform, counted)
        found[METADATA_CHANNEL] = _count(transform, METADATA_CHANNEL, item.metadata)
        found = {channel: n for channel, n in found.items() if n}
        if found:
            dirty.append(namespace)
        if namespace == "":
            head_counts = found
        else:
            older += sum(found.values())
    return head_counts, older, dirty


def _older_counts(
    saved: Sequence[CheckpointTuple],
    heads: dict[str, CheckpointTuple],
    transform: Transform,
    counted: set[tuple[str, str, object]],
) -> int:
    """Occurrences in every pending write and in every checkpoint but the heads."""
    head_ids = {(ns, _checkpoint_id(item)) for ns, item in heads.items()}
    older = 0
    for item in saved:
        namespace = _namespace(item)
        for _task, channel, value in item.pending_writes or ():
            older += _count(transform, channel, value)
        if (namespace, _checkpoint_id(item)) in head_ids:
            continue
        older += sum(_count_values(namespace, item, transform, counted).values())
        older += _count(transform, METADATA_CHANNEL, item.metadata)
    return older


def _count(transform: Transform, channel: str, value: Any) -> int:
    return transform(channel, value)[1]


def _count_values(
    namespace: str,
    saved: CheckpointTuple,
    transform: Transform,
    counted: set[tuple[str, str, object]],
) -> dict[str, int]:
    """Occurrences per channel, skipping channel versions already counted."""
    checkpoint = saved.checkpoint
    versions = checkpoint.get("channel_versions") or {}
    found: dict[str, int] = {}
    for channel, value in (checkpoint.get("channel_values") or {}).items():
        version = versions.get(channel)
        if version is not None:
            key = (namespace, channel, version)
            if key in counted:
                continue
            counted.add(key)
        found[channel] = _count(transform, channel, value)
    return found


def _new_head(
    saved: CheckpointTuple,
    transform: Transform,
    next_version: Callable[[Any], str | int | float],
) -> _NewHead:
    """The head with every channel value and its metadata transformed.

    Changed channels get one new version above every current one, as a superstep gives
    them; the versions each node has seen move along, so nothing looks unseen.
    """
    checkpoint = copy_checkpoint(saved.checkpoint)
    changed: list[str] = []
    for channel, value in saved.checkpoint["channel_values"].items():
        redacted, found = transform(channel, value)
        if found:
            checkpoint["channel_values"][channel] = redacted
            changed.append(channel)
    new_versions = _bumped(checkpoint, changed, next_version) if changed else {}
    metadata = _head_metadata(saved, transform)
    checkpoint["id"] = str(uuid6(clock_seq=metadata["step"]))
    checkpoint["ts"] = datetime.datetime.now(datetime.UTC).isoformat()
    return _NewHead(
        namespace=_namespace(saved),
        parent=saved.config,
        checkpoint=checkpoint,
        metadata=cast("CheckpointMetadata", metadata),
        changed=new_versions,
    )


def _bumped(
    checkpoint: Checkpoint,
    changed: list[str],
    next_version: Callable[[Any], str | int | float],
) -> dict[str, str | int | float]:
    """Give the ``changed`` channels one new version, in ``checkpoint``; returns them."""
    versions = checkpoint["channel_versions"]
    current = max(versions.values()) if versions else None
    version = next_version(current)
    new_versions: dict[str, str | int | float] = {}
    for channel in changed:
        old = versions.get(channel)
        versions[channel] = version
        new_versions[channel] = version
        for seen in checkpoint["versions_seen"].values():
            if old is not None and seen.get(channel) == old:
                seen[channel] = version
    return new_versions


def _head_metadata(saved: CheckpointTuple, transform: Transform) -> dict[str, Any]:
    """The new head's metadata: transformed, one step on, marked as a redaction."""
    old_metadata: dict[str, Any] = dict(saved.metadata or {})
    metadata, _ = transform(METADATA_CHANNEL, old_metadata)
    step = old_metadata.get("step")
    return {
        **metadata,
        "source": "update",
        "step": (step if isinstance(step, int) else -1) + 1,
        "parents": {},
        REDACTION_KEY: True,
    }


def _new_heads(
    plan: _Plan, transform: Transform, saver: BaseCheckpointSaver[Any]
) -> list[_NewHead]:
    def next_version(current: Any) -> str | int | float:
        return cast("str | int | float", saver.get_next_version(current, None))

    return [_new_head(plan.heads[ns], transform, next_version) for ns in plan.dirty]


def _put_config(head: _NewHead, thread_id: str, *, alone: bool) -> RunnableConfig:
    """Under the old head (it becomes the parent) or, written alone, with no parent."""
    if not alone:
        return head.parent
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": head.namespace}}


def _all_versions(head: _NewHead) -> dict[str, str | int | float]:
    """Every channel's version: a head written alone brings all its values."""
    return dict(head.checkpoint["channel_versions"])


def _can_prune(saver: BaseCheckpointSaver[Any], name: str = "prune") -> bool:
    return getattr(type(saver), name) is not getattr(BaseCheckpointSaver, name)


async def _acan_prune(saver: BaseCheckpointSaver[Any]) -> bool:
    return _can_prune(saver, "aprune")


def _listed(saver: BaseCheckpointSaver[Any], thread_id: str) -> list[CheckpointTuple]:
    return list(saver.list(_thread_config(thread_id)))


async def _alisted(saver: BaseCheckpointSaver[Any], thread_id: str) -> list[CheckpointTuple]:
    return [item async for item in saver.alist(_thread_config(thread_id))]


def _done(plan: _Plan, *, rewritten: bool) -> CheckpointRewrite:
    result = plan.result
    return CheckpointRewrite(result.head, result.older, result.older_checkpoints, rewritten)


def _check_clean(thread_id: str, after: _Plan) -> None:
    if after.found:
        raise CheckpointRewriteError(
            f"thread {thread_id}: {after.result.total} occurrence(s) remain in its "
            f"checkpoints after the rewrite (head channels {sorted(after.result.head)}, "
            f"{after.result.older} elsewhere)"
        )


def _write_heads(
    checkpointer: BaseCheckpointSaver[Any], thread_id: str, plan: _Plan, heads: list[_NewHead]
) -> Flow[None]:
    """Write the new heads, then prune the rest (or, with no prune, delete and rewrite)."""
    prunes = yield from io(_can_prune, _acan_prune, checkpointer)
    if not prunes:
        yield from io(checkpointer.delete_thread, checkpointer.adelete_thread, thread_id)
    for head in heads if prunes else _kept_heads(plan, heads):
        yield from io(
            checkpointer.put,
            checkpointer.aput,
            _put_config(head, thread_id, alone=not prunes),
            head.checkpoint,
            head.metadata,
            head.changed if prunes else _all_versions(head),
        )
    if prunes:
        yield from io(checkpointer.prune, checkpointer.aprune, [thread_id], strategy="keep_latest")


def _rewrite(
    checkpointer: BaseCheckpointSaver[Any],
    thread_id: str,
    transform: Transform,
    *,
    dry_run: bool = False,
    prune_always: bool = False,
) -> Flow[CheckpointRewrite]:
    """The rewrite, run by ``run`` (:func:`rewrite_thread`) or ``arun``."""
    saved = yield from io(_listed, _alisted, checkpointer, thread_id)
    plan = _plan(thread_id, saved, transform)
    if dry_run or not (plan.found or prune_always) or not saved:
        return _done(plan, rewritten=False)
    heads = _new_heads(plan, transform, checkpointer)
    yield from _write_heads(checkpointer, thread_id, plan, heads)
    after = yield from io(_listed, _alisted, checkpointer, thread_id)
    _check_clean(thread_id, _plan(thread_id, after, transform))
    return _done(plan, rewritten=bool(heads) or plan.result.older_checkpoints > 0)


def rewrite_thread(
    checkpointer: BaseCheckpointSaver[Any],
    thread_id: str,
    transform: Transform,
    **options: Unpack[RewriteOptions],
) -> CheckpointRewrite:
    """Remove what ``transform`` replaces from every checkpoint of ``thread_id``.

    Args:
        checkpointer: The thread's saver (``PostgresSaver``, ``InMemorySaver``, ...).
        thread_id: The thread to rewrite; hold its thread lock while this runs.
        transform: Replaces the text in one channel's value and counts the occurrences;
            it is also given pending writes (by channel) and metadata
            (``METADATA_CHANNEL``).
        dry_run: Only count; change nothing.
        prune_always: Prune the older checkpoints even when nothing was found.

    Returns:
        The counts found before the rewrite, and whether the checkpoints changed.

    Raises:
        PendingWritesError: A head has pending writes (checked in a dry run too).
        CheckpointRewriteError: Occurrences remain after the rewrite.

    """
    return run(_rewrite(checkpointer, thread_id, transform, **options))


async def arewrite_thread(
    checkpointer: BaseCheckpointSaver[Any],
    thread_id: str,
    transform: Transform,
    **options: Unpack[RewriteOptions],
) -> CheckpointRewrite:
    """Async :func:`rewrite_thread` (``AsyncPostgresSaver``, or any saver's async methods)."""
    return await arun(_rewrite(checkpointer, thread_id, transform, **options))


def _kept_heads(plan: _Plan, heads: list[_NewHead]) -> list[_NewHead]:
    """For the delete-and-rewrite fallback: every kept namespace's head, new or as it was.

    A clean head is written again as it was, with no parent, as the prune would leave it.
    """
    rewritten = {head.namespace for head in heads}
    unchanged = [
        _NewHead(
            namespace=ns,
            parent=item.config,
            checkpoint=copy_checkpoint(item.checkpoint),
            metadata=item.metadata,
            changed={},
        )
        for ns, item in plan.heads.items()
        if ns not in rewritten
    ]
    return [*heads, *unchanged]
