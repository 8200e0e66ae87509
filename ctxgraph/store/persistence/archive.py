"""The per-thread archive of folded messages in the Store: reading, writing and searching it.

The record format lives in ``archive_record``, the verification of an archive in
``archive_verify`` (and ``archive_redaction_checks``); their public names are importable
from here too. ``verify_thread`` reads an archive and its redaction anchors, then verifies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore, Item, SearchItem

from ctxgraph.store.namespaces import thread_archive, thread_redactions
from ctxgraph.store.persistence.archive_record import (
    HASH_FIELDS,
    HASH_VERSION,
    ArchiveRecord,
    build_record,
    committed_version,
    record_digest,
    record_hashes,
    record_messages,
    serialized_messages,
    version_key,
)
from ctxgraph.store.persistence.archive_redaction_checks import RedactionAnchors, RedactionNote
from ctxgraph.store.persistence.archive_verify import (
    TAMPERED,
    VerifyReport,
    tampered_versions,
    verify_records,
    verify_versioned,
)
from ctxgraph.store.persistence.listing import alist_namespace, list_namespace
from ctxgraph.store.text_codec import decoded, encoded

__all__ = [
    "HASH_FIELDS",
    "HASH_VERSION",
    "PAGE_SIZE",
    "TAMPERED",
    "ArchiveConflictError",
    "ArchiveRecord",
    "RedactionAnchors",
    "RedactionNote",
    "ThreadArchive",
    "VerifyReport",
    "aredaction_anchors",
    "averify_thread",
    "build_record",
    "committed_version",
    "record_digest",
    "record_hashes",
    "record_messages",
    "redaction_anchors",
    "search_records",
    "serialized_messages",
    "tampered_versions",
    "verify_records",
    "verify_thread",
    "verify_versioned",
    "version_key",
]

PAGE_SIZE = 100
"""Items fetched per Store search while listing an archive."""

_KEY = re.compile(r"v(\d{6,})")


class ArchiveConflictError(RuntimeError):
    """A different record is already archived under the same, committed, version."""


class ThreadArchive:
    """The archive of one thread: one Store item per compaction version."""

    def __init__(self, store: BaseStore, thread_id: str, *, page_size: int = PAGE_SIZE) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        self.store = store
        self.thread_id = thread_id
        self.namespace = thread_archive(thread_id)
        self._page_size = page_size

    def put(self, record: ArchiveRecord, *, committed_version: int | None = None) -> None:
        """Archive ``record``; a no-op if the same record is already there.

        ``committed_version`` is the version of the thread state's mark. A record above it
        is *prepared*: a different record under its key is a leftover of an interrupted
        compaction and is replaced. A committed version (at or below the mark, or any
        version when no mark is given) is never overwritten: a different record there
        raises ``ArchiveConflictError``.
        """
        key = version_key(record["version"])
        existing = self.store.get(self.namespace, key)
        if not _already_stored(record, existing, _prepared(record, committed_version)):
            self.store.put(self.namespace, key, encoded(dict(record)), index=False)

    async def aput(self, record: ArchiveRecord, *, committed_version: int | None = None) -> None:
        """Async :meth:`put`."""
        key = version_key(record["version"])
        existing = await self.store.aget(self.namespace, key)
        if not _already_stored(record, existing, _prepared(record, committed_version)):
            await self.store.aput(self.namespace, key, encoded(dict(record)), index=False)

    def get(self, version: int) -> ArchiveRecord | None:
        """The record stored under ``version``, or None."""
        item = self.store.get(self.namespace, version_key(version))
        return None if item is None else cast(ArchiveRecord, decoded(item.value))

    async def aget(self, version: int) -> ArchiveRecord | None:
        """Async :meth:`get`."""
        item = await self.store.aget(self.namespace, version_key(version))
        return None if item is None else cast(ArchiveRecord, decoded(item.value))

    def versioned(self, *, upto: int | None = None) -> list[tuple[int, ArchiveRecord]]:
        """``(version, record)`` pairs ordered by the version of their Store key.

        ``upto`` keeps only versions at or below it: pass the thread's committed version
        (:func:`committed_version` of its mark) to leave prepared leftovers out.
        """
        items = list_namespace(self.store, self.namespace, page=self._page_size)
        return self._ordered(items, upto)

    async def aversioned(self, *, upto: int | None = None) -> list[tuple[int, ArchiveRecord]]:
        """Async :meth:`versioned`."""
        items = await alist_namespace(self.store, self.namespace, page=self._page_size)
        return self._ordered(items, upto)

    def records(self, *, upto: int | None = None) -> list[ArchiveRecord]:
        """Every record (committed ones only, given ``upto``), ordered by version."""
        return [record for _, record in self.versioned(upto=upto)]

    async def arecords(self, *, upto: int | None = None) -> list[ArchiveRecord]:
        """Async :meth:`records`."""
        return [record for _, record in await self.aversioned(upto=upto)]

    def latest(self, *, upto: int | None = None) -> ArchiveRecord | None:
        """The highest-version record (at or below ``upto``), or None for an empty archive."""
        records = self.records(upto=upto)
        return records[-1] if records else None

    async def alatest(self, *, upto: int | None = None) -> ArchiveRecord | None:
        """Async :meth:`latest`."""
        records = await self.arecords(upto=upto)
        return records[-1] if records else None

    def search_messages(
        self, query: str, limit: int, *, upto: int | None = None
    ) -> list[tuple[int, BaseMessage]]:
        """Archived messages whose text contains ``query`` (any case), as (version, message).

        Newest first: highest version first, and within a version the latest message first.
        ``upto`` searches committed versions only, as in :meth:`versioned`.
        """
        _check_query(query)
        return search_records(self.records(upto=upto), query, limit)

    async def asearch_messages(
        self, query: str, limit: int, *, upto: int | None = None
    ) -> list[tuple[int, BaseMessage]]:
        """Async :meth:`search_messages`."""
        _check_query(query)
        return search_records(await self.arecords(upto=upto), query, limit)

    @staticmethod
    def _ordered(items: list[SearchItem], upto: int | None) -> list[tuple[int, ArchiveRecord]]:
        """The version records among ``items`` (at or below ``upto``), ordered by version."""
        found: dict[int, ArchiveRecord] = {}
        for item in items:
            match = _KEY.fullmatch(item.key)
            if match and (upto is None or int(match.group(1)) <= upto):
                found[int(match.group(1))] = cast(ArchiveRecord, decoded(item.value))
        return [(version, found[version]) for version in sorted(found)]


def _check_query(query: str) -> None:
    if not query.casefold():
        raise ValueError("search_messages needs a non-empty query")


def search_records(
    records: Sequence[ArchiveRecord], query: str, limit: int
) -> list[tuple[int, BaseMessage]]:
    """Messages of ``records`` containing ``query`` (any case), newest first.

    A record whose messages cannot be read (a damaged record) is skipped.
    """
    needle = query.casefold()
    hits: list[tuple[int, BaseMessage]] = []
    if limit < 1:
        return hits
    for record in reversed(records):
        try:
            messages = record_messages(record)
        except (KeyError, TypeError, ValueError):
            continue
        for message in reversed(messages):
            if needle in message.text.casefold():
                hits.append((record["version"], message))
                if len(hits) == limit:
                    return hits
    return hits


def _prepared(record: ArchiveRecord, committed_version: int | None) -> bool:
    """Whether ``record`` lies above the thread's committed version (None: nothing is)."""
    return committed_version is not None and record["version"] > committed_version


def _already_stored(record: ArchiveRecord, existing: Item | None, prepared: bool) -> bool:
    """True if ``existing`` holds the same record.

    A different record under a committed version raises; under a prepared one it is a
    leftover, and False says to replace it.
    """
    if existing is None:
        return False
    stored = existing.value
    if (stored.get("checksum"), stored.get("chain_hash")) == (
        record["checksum"],
        record["chain_hash"],
    ):
        return True
    if prepared:
        return False
    raise ArchiveConflictError(
        f"version {record['version']} is already archived with different content "
        f"(stored chain hash {str(stored.get('chain_hash'))[:12]}…, "
        f"new {record['chain_hash'][:12]}…); committed versions are never overwritten"
    )


def verify_thread(store: BaseStore, thread_id: str, mark: Mapping[str, Any] | None) -> VerifyReport:
    """Verify the archive of ``thread_id`` in ``store`` against the thread state's mark.

    Versions above the mark are prepared leftovers: listed in ``prepared``, not verified.
    The thread's redaction anchors are read from the Store (see ``verify_records``).
    """
    versioned = ThreadArchive(store, thread_id).versioned()
    return verify_versioned(versioned, mark, redaction_anchors(store, thread_id))


async def averify_thread(
    store: BaseStore, thread_id: str, mark: Mapping[str, Any] | None
) -> VerifyReport:
    """Async :func:`verify_thread`."""
    versioned = await ThreadArchive(store, thread_id).aversioned()
    return verify_versioned(versioned, mark, await aredaction_anchors(store, thread_id))


def redaction_anchors(store: BaseStore, thread_id: str) -> dict[str, Any]:
    """The redaction anchors of ``thread_id``: receipt id -> anchor (see ``RedactionAnchors``)."""
    return {item.key: item.value for item in list_namespace(store, thread_redactions(thread_id))}


async def aredaction_anchors(store: BaseStore, thread_id: str) -> dict[str, Any]:
    """Async :func:`redaction_anchors`."""
    items = await alist_namespace(store, thread_redactions(thread_id))
    return {item.key: item.value for item in items}
