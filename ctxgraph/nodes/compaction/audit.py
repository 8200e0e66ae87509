"""Warns, once per graph and finding, about archived records modified or missing."""

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


MISSING = "is missing from the archive"
"""In the warning about a committed version the Store no longer holds."""


class ArchiveAudit:
    """The archive check at the start of every compaction: cheap, and warns once per finding.

    The first compaction of a thread in this graph object reads every committed version
    (one Store listing), warns of each record that no longer matches its stored hashes and
    names the versions missing from 1 up to the mark. Every later compaction reads one
    record, the version the mark names, and checks it against its own hashes and the mark
    (``checksum``, ``cursor``, ``chain_hash``); the full chain is left to ``ctxgraph
    threads verify``. Findings are warnings on ``ctxgraph.compaction`` (the command line
    prints them as ``warning: ...``); the same finding is not repeated for a thread.
    """

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self._checked: OrderedDict[str, int] = OrderedDict()
        self._warned: OrderedDict[str, set[tuple[int, str]]] = OrderedDict()
        self._max_threads = max_threads

    def _listing_due(self, thread_id: str, upto: int) -> bool:
        """Whether versions up to ``upto`` include some this graph has not checked yet."""
        return upto > self._checked.get(thread_id, 0)

    def check(self, archive: ThreadArchive, mark: Mapping[str, Any] | None) -> None:
        """Check the thread's archive against ``mark`` (the state the compaction starts from)."""
        upto = committed_version(mark)
        if not upto:
            return
        thread_id = archive.thread_id
        if self._listing_due(thread_id, upto):
            self._all(thread_id, archive.versioned(upto=upto), mark, upto)
        else:
            self._latest(thread_id, upto, archive.get(upto), mark)

    async def acheck(self, archive: ThreadArchive, mark: Mapping[str, Any] | None) -> None:
        """Async :meth:`check`."""
        upto = committed_version(mark)
        if not upto:
            return
        thread_id = archive.thread_id
        if self._listing_due(thread_id, upto):
            self._all(thread_id, await archive.aversioned(upto=upto), mark, upto)
        else:
            self._latest(thread_id, upto, await archive.aget(upto), mark)

    def wrote(self, thread_id: str, version: int) -> None:
        """Note that this graph archived ``version`` itself, right after checking the rest."""
        if self._checked.get(thread_id, 0) >= version - 1:
            self._remember(thread_id, version)

    def _all(
        self,
        thread_id: str,
        versioned: Sequence[tuple[int, ArchiveRecord]],
        mark: Mapping[str, Any] | None,
        upto: int,
    ) -> None:
        present = {version for version, _ in versioned}
        for version in range(1, upto + 1):
            if version not in present:
                self._warn_missing(thread_id, version, upto)
        for version, reason in sorted(tampered_versions(versioned, mark).items()):
            self._warn_tampered(thread_id, version, reason)
        self._remember(thread_id, upto)

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
        if reason is not None:
            self._warn_tampered(thread_id, version, reason)

    def _warn_tampered(self, thread_id: str, version: int, reason: str) -> None:
        if not self._first(thread_id, version, reason):
            return
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
        while len(self._warned) > self._max_threads:
            self._warned.popitem(last=False)
        if (version, reason) in seen:
            return False
        seen.add((version, reason))
        return True

    def _remember(self, thread_id: str, version: int) -> None:
        self._checked[thread_id] = version
        self._checked.move_to_end(thread_id)
        while len(self._checked) > self._max_threads:
            self._checked.popitem(last=False)
