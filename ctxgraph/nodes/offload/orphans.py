"""Orphan artifacts: stored by a step that never committed, and removed by a later one.

A crash between storing an artifact (a large tool result, say) and the checkpoint that
would have referred to it leaves an artifact nothing refers to. A later offload step, or
an eviction, removes the thread's artifacts that are referred to nowhere — not by the
state (its messages, record, delegations or any other value) and not by any archived
record (folded messages keep their artifacts) — once they are older than a grace period,
so that a step still in flight on the thread keeps the artifacts it just wrote.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from langchain_core.messages import BaseMessage

from ctxgraph.nodes.offload.refs import live_refs
from ctxgraph.state.sans_io import Flow, io, run
from ctxgraph.store.artifacts import Artifact, ArtifactStore
from ctxgraph.store.persistence.archive import ArchiveRecord, ThreadArchive

logger = logging.getLogger("ctxgraph.offload")

ORPHAN_GRACE = timedelta(minutes=10)
"""How old an unreferenced artifact must be before it is removed: longer than any step."""

MAX_THREADS = 4_096
"""Threads whose last sweep one sweeper remembers (least recently used forgotten)."""

_REF = re.compile(r"art-[0-9a-f]{24}")


def mentioned_refs(value: object) -> set[str]:
    """Every ref written anywhere in ``value``: strings, mappings, sequences and messages."""
    found: set[str] = set()
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            found.update(_REF.findall(item))
        elif isinstance(item, BaseMessage):
            pending.extend(
                [item.content, item.additional_kwargs, getattr(item, "tool_calls", None)]
            )
        elif isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            pending.extend(item)
    return found


def orphan_candidates(
    listed: Iterable[Artifact],
    state: Mapping[str, Any],
    keep: Collection[str],
    cutoff: datetime,
) -> list[str]:
    """Refs of ``listed`` older than ``cutoff`` that ``state`` and ``keep`` do not refer to.

    The archive is not read here: a candidate may still be referred to by a folded message.
    """
    referred = live_refs(state) | set(keep) | mentioned_refs(dict(state))
    return [
        artifact.ref
        for artifact in listed
        if artifact.ref not in referred and _older(artifact.created_at, cutoff)
    ]


def unarchived(candidates: Sequence[str], records: Iterable[ArchiveRecord]) -> list[str]:
    """The ``candidates`` no archived record (committed or prepared) refers to."""
    if not candidates:
        return []
    archived = mentioned_refs(list(records))
    return [ref for ref in candidates if ref not in archived]


def _older(created_at: str, cutoff: datetime) -> bool:
    try:
        moment = datetime.fromisoformat(created_at)
    except ValueError:
        return False
    return moment.tzinfo is not None and moment < cutoff


class OrphanSweep:
    """Removes a thread's orphan artifacts, at most once per ``grace`` per thread.

    Cheap when there are none: one listing of the thread's artifacts; the archive is read
    only when an unreferenced candidate is old enough.
    """

    def __init__(self, grace: timedelta = ORPHAN_GRACE, max_threads: int = MAX_THREADS) -> None:
        if grace < timedelta(0):
            raise ValueError(f"grace must be 0 or more, got {grace}")
        self.grace = grace
        self._last: OrderedDict[str, datetime] = OrderedDict()
        self._max_threads = max_threads
        self._lock = threading.Lock()

    def _due(self, artifacts: ArtifactStore, force: bool) -> datetime | None:
        """The cutoff of a sweep due now, or None (swept less than ``grace`` ago)."""
        now = artifacts.now()
        with self._lock:
            last = self._last.get(artifacts.thread_id)
            if not force and last is not None and now - last < self.grace:
                return None
            self._last[artifacts.thread_id] = now
            self._last.move_to_end(artifacts.thread_id)
            while len(self._last) > self._max_threads:
                self._last.popitem(last=False)
        return now - self.grace

    def sweep(
        self,
        artifacts: ArtifactStore,
        state: Mapping[str, Any],
        keep: Collection[str] = (),
        *,
        force: bool = False,
    ) -> list[str]:
        """Remove the thread's orphans; returns their refs. ``force`` ignores the rate limit."""
        return run(self.sweep_flow(artifacts, state, keep, force))

    def sweep_flow(
        self, artifacts: ArtifactStore, state: Mapping[str, Any], keep: Collection[str], force: bool
    ) -> Flow[list[str]]:
        """:meth:`sweep` as a flow (``ctxgraph.state.sans_io``), for ``arun`` or ``yield from``."""
        cutoff = self._due(artifacts, force)
        if cutoff is None:
            return []
        listed = yield from io(artifacts.list, artifacts.alist)
        candidates = orphan_candidates(listed, state, keep, cutoff)
        if not candidates:
            return []
        archive = ThreadArchive(artifacts.store, artifacts.thread_id)
        records = yield from io(archive.records, archive.arecords)
        victims = unarchived(candidates, records)
        removed = yield from io(artifacts.remove, artifacts.aremove, victims, created_before=cutoff)
        _log_removed(artifacts.thread_id, removed)
        return removed


def _log_removed(thread_id: str, refs: Sequence[str]) -> None:
    if refs:
        logger.info(
            "removed %d orphan artifact(s) of thread %s (stored by a step that never "
            "committed; nothing refers to them): %s",
            len(refs),
            thread_id,
            ", ".join(refs),
        )
