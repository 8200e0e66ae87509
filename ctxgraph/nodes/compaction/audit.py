"""Warns, once per graph and thread version, about archived records modified after archiving."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ctxgraph.store.persistence.archive import (
    TAMPERED,
    ArchiveRecord,
    ThreadArchive,
    committed_version,
    tampered_versions,
)

logger = logging.getLogger("ctxgraph.compaction")

MAX_THREADS = 4_096
"""Threads whose checked versions one graph remembers (least recently used forgotten)."""


class ArchiveAudit:
    """Checks each committed archive version of a thread once, when a compaction runs.

    The first compaction of a thread in this graph object reads the thread's committed
    records (one Store listing) and logs a warning on ``ctxgraph.compaction`` for each
    record that no longer matches its stored hashes. Later compactions read nothing:
    the versions they write themselves are known to be intact.
    """

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self._checked: OrderedDict[str, int] = OrderedDict()
        self._max_threads = max_threads

    def _pending(self, thread_id: str, mark: Mapping[str, Any] | None) -> int | None:
        """The committed version to check up to, or None when nothing new is committed."""
        upto = committed_version(mark)
        if upto is None or upto <= self._checked.get(thread_id, 0):
            return None
        return upto

    def check(self, archive: ThreadArchive, mark: Mapping[str, Any] | None) -> None:
        """Check the thread's committed versions not yet checked by this graph."""
        upto = self._pending(archive.thread_id, mark)
        if upto is not None:
            self._report(archive.thread_id, archive.versioned(upto=upto), mark, upto)

    async def acheck(self, archive: ThreadArchive, mark: Mapping[str, Any] | None) -> None:
        """Async :meth:`check`."""
        upto = self._pending(archive.thread_id, mark)
        if upto is not None:
            self._report(archive.thread_id, await archive.aversioned(upto=upto), mark, upto)

    def wrote(self, thread_id: str, version: int) -> None:
        """Note that this graph archived ``version`` itself, right after checking the rest."""
        if self._checked.get(thread_id, 0) >= version - 1:
            self._remember(thread_id, version)

    def _report(
        self,
        thread_id: str,
        versioned: Sequence[tuple[int, ArchiveRecord]],
        mark: Mapping[str, Any] | None,
        upto: int,
    ) -> None:
        already = self._checked.get(thread_id, 0)
        for version, reason in sorted(tampered_versions(versioned, mark).items()):
            if version > already:
                logger.warning(
                    "archive version %d of thread %s: %s (%s); `ctxgraph threads verify %s` "
                    "checks the whole chain",
                    version,
                    thread_id,
                    TAMPERED,
                    reason,
                    thread_id,
                )
        self._remember(thread_id, upto)

    def _remember(self, thread_id: str, version: int) -> None:
        self._checked[thread_id] = version
        self._checked.move_to_end(thread_id)
        while len(self._checked) > self._max_threads:
            self._checked.popitem(last=False)
