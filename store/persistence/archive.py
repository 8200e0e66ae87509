"""The per-thread archive of folded messages in the Store, and its verification."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict, cast

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict
from langgraph.store.base import BaseStore, Item, SearchItem

from ctxgraph.state.summary import CHAIN_SEED, chain_hash, checksum
from ctxgraph.store.namespaces import thread_archive
from ctxgraph.store.persistence.listing import alist_namespace, list_namespace

PAGE_SIZE = 100
"""Items fetched per Store search while listing an archive."""

_KEY = re.compile(r"v(\d{6,})")
_FIELD_TYPES: dict[str, type] = {
    "version": int,
    "messages": list,
    "event_ids": list,
    "cursor": int,
    "summary": dict,
    "checksum": str,
    "previous_chain_hash": str,
    "chain_hash": str,
}


class ArchiveRecord(TypedDict):
    """One compaction version: the messages it folded and the summary it produced."""

    version: int
    messages: list[dict[str, Any]]
    event_ids: list[str]
    cursor: int
    summary: dict[str, Any]
    checksum: str
    previous_chain_hash: str
    chain_hash: str
    created_at: str


class ArchiveConflictError(RuntimeError):
    """A different record is already archived under the same version."""


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of verifying an archive; names the first broken version and why."""

    ok: bool
    versions_checked: int
    first_broken_version: int | None
    reason: str | None


def version_key(version: int) -> str:
    """The Store key of a compaction version, e.g. ``v000003``."""
    return f"v{version:06d}"


def build_record(
    *,
    version: int,
    messages: Sequence[BaseMessage],
    summary: dict[str, Any],
    previous_cursor: int,
    previous_chain_hash: str,
) -> ArchiveRecord:
    """Build the archive record of ``version``, which folds ``messages`` into ``summary``."""
    if version < 1:
        raise ValueError(f"archive versions start at 1, got {version}")
    event_ids: list[str] = []
    for index, message in enumerate(messages):
        if not message.id:
            raise ValueError(
                f"folded message {index} ({message.type}) of version {version} has no id; "
                "every archived message needs one"
            )
        event_ids.append(message.id)
    cursor = previous_cursor + len(messages)
    return ArchiveRecord(
        version=version,
        messages=messages_to_dict(messages),
        event_ids=event_ids,
        cursor=cursor,
        summary=summary,
        checksum=checksum(summary, cursor, event_ids),
        previous_chain_hash=previous_chain_hash,
        chain_hash=chain_hash(previous_chain_hash, messages),
        created_at=datetime.now(UTC).isoformat(),
    )


def record_messages(record: ArchiveRecord) -> list[BaseMessage]:
    """The messages a record folded, in their original order."""
    return messages_from_dict(record["messages"])


class ThreadArchive:
    """The archive of one thread: one Store item per compaction version."""

    def __init__(self, store: BaseStore, thread_id: str, *, page_size: int = PAGE_SIZE) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        self.store = store
        self.thread_id = thread_id
        self.namespace = thread_archive(thread_id)
        self._page_size = page_size

    def put(self, record: ArchiveRecord, *, uncommitted: bool = False) -> None:
        """Archive ``record``; a no-op if the same record is already there.

        ``uncommitted=True`` says the thread state has not committed this version yet, so
        a different record under its key is a leftover of an interrupted attempt and is
        replaced instead of raising ``ArchiveConflictError``.
        """
        key = version_key(record["version"])
        if uncommitted or not _already_stored(record, self.store.get(self.namespace, key)):
            self.store.put(self.namespace, key, dict(record), index=False)

    async def aput(self, record: ArchiveRecord, *, uncommitted: bool = False) -> None:
        """Async :meth:`put`."""
        key = version_key(record["version"])
        if uncommitted or not _already_stored(record, await self.store.aget(self.namespace, key)):
            await self.store.aput(self.namespace, key, dict(record), index=False)

    def get(self, version: int) -> ArchiveRecord | None:
        """The record stored under ``version``, or None."""
        item = self.store.get(self.namespace, version_key(version))
        return None if item is None else cast(ArchiveRecord, item.value)

    async def aget(self, version: int) -> ArchiveRecord | None:
        """Async :meth:`get`."""
        item = await self.store.aget(self.namespace, version_key(version))
        return None if item is None else cast(ArchiveRecord, item.value)

    def records(self) -> list[ArchiveRecord]:
        """Every record, ordered by the version of its Store key."""
        return self._ordered(list_namespace(self.store, self.namespace, page=self._page_size))

    async def arecords(self) -> list[ArchiveRecord]:
        """Async :meth:`records`."""
        items = await alist_namespace(self.store, self.namespace, page=self._page_size)
        return self._ordered(items)

    def latest(self) -> ArchiveRecord | None:
        """The highest-version record, or None for an empty archive."""
        records = self.records()
        return records[-1] if records else None

    async def alatest(self) -> ArchiveRecord | None:
        """Async :meth:`latest`."""
        records = await self.arecords()
        return records[-1] if records else None

    def search_messages(self, query: str, limit: int) -> list[tuple[int, BaseMessage]]:
        """Archived messages whose text contains ``query`` (any case), as (version, message).

        Newest first: highest version first, and within a version the latest message first.
        """
        _check_query(query)
        return search_records(self.records(), query, limit)

    async def asearch_messages(self, query: str, limit: int) -> list[tuple[int, BaseMessage]]:
        """Async :meth:`search_messages`."""
        _check_query(query)
        return search_records(await self.arecords(), query, limit)

    @staticmethod
    def _ordered(items: list[SearchItem]) -> list[ArchiveRecord]:
        """The version records among ``items``, ordered by version."""
        found: dict[int, ArchiveRecord] = {}
        for item in items:
            match = _KEY.fullmatch(item.key)
            if match:
                found[int(match.group(1))] = cast(ArchiveRecord, item.value)
        return [found[version] for version in sorted(found)]


def _check_query(query: str) -> None:
    if not query.casefold():
        raise ValueError("search_messages needs a non-empty query")


def search_records(
    records: Sequence[ArchiveRecord], query: str, limit: int
) -> list[tuple[int, BaseMessage]]:
    """Messages of ``records`` containing ``query`` (any case), newest first."""
    needle = query.casefold()
    hits: list[tuple[int, BaseMessage]] = []
    if limit < 1:
        return hits
    for record in reversed(records):
        for message in reversed(record_messages(record)):
            if needle in message.text.casefold():
                hits.append((record["version"], message))
                if len(hits) == limit:
                    return hits
    return hits


def _already_stored(record: ArchiveRecord, existing: Item | None) -> bool:
    """True if ``existing`` holds the same record; raise if it holds a different one."""
    if existing is None:
        return False
    stored = existing.value
    if (stored.get("checksum"), stored.get("chain_hash")) == (
        record["checksum"],
        record["chain_hash"],
    ):
        return True
    raise ArchiveConflictError(
        f"version {record['version']} is already archived with different content "
        f"(stored chain hash {str(stored.get('chain_hash'))[:12]}…, "
        f"new {record['chain_hash'][:12]}…); archived versions are never overwritten"
    )


def verify_records(
    records: Sequence[ArchiveRecord], mark: Mapping[str, Any] | None
) -> VerifyReport:
    """Verify records given in archive order (ascending versions 1..N), then the mark.

    Reports the first problem found; ``versions_checked`` counts the versions found intact
    before it. The mark is the thread state's {version, cursor, checksum, chain_hash}.
    """
    present = {record.get("version") for record in records}
    previous_hash, previous_cursor = CHAIN_SEED, 0
    for index, record in enumerate(records):
        expected = index + 1
        problem = _record_problem(record, expected, present, previous_hash, previous_cursor)
        if problem is not None:
            return VerifyReport(False, index, expected, problem)
        previous_hash, previous_cursor = record["chain_hash"], record["cursor"]
    if mark is None:
        return VerifyReport(True, len(records), None, None)
    return _mark_report(mark, records)


def verify_thread(store: BaseStore, thread_id: str, mark: Mapping[str, Any] | None) -> VerifyReport:
    """Verify the archive of ``thread_id`` in ``store`` against the thread state's mark."""
    return verify_records(ThreadArchive(store, thread_id).records(), mark)


async def averify_thread(
    store: BaseStore, thread_id: str, mark: Mapping[str, Any] | None
) -> VerifyReport:
    """Async :func:`verify_thread`."""
    return verify_records(await ThreadArchive(store, thread_id).arecords(), mark)


def _record_problem(
    record: ArchiveRecord,
    expected: int,
    present: set[int],
    previous_hash: str,
    previous_cursor: int,
) -> str | None:
    """Why the record in place of version ``expected`` is broken, or None if it is intact."""
    fields: Mapping[str, object] = record
    for name, kind in _FIELD_TYPES.items():
        if not isinstance(fields.get(name), kind) or isinstance(fields.get(name), bool):
            return f"the record of version {expected} has no valid {name!r} field"
    version = record["version"]
    if version != expected:
        if version > expected and expected not in present:
            return f"version {expected} is missing from the archive"
        return (
            f"the record in place of version {expected} is labelled version {version} "
            "(records swapped, reordered or relabelled)"
        )
    if record["previous_chain_hash"] != previous_hash:
        before = "the chain seed" if version == 1 else f"version {version - 1}'s chain hash"
        return f"version {version} does not link to {before} (previous_chain_hash differs)"
    try:
        messages = record_messages(record)
    except (KeyError, TypeError, ValueError) as error:
        return f"version {version}'s messages cannot be read: {error}"
    if chain_hash(previous_hash, messages) != record["chain_hash"]:
        return (
            f"version {version}'s messages do not match its chain hash "
            "(messages edited, added, dropped or reordered)"
        )
    if record["event_ids"] != [message.id for message in messages]:
        return f"version {version}'s event_ids do not match the ids of its messages"
    if record["cursor"] != previous_cursor + len(messages):
        return (
            f"version {version}'s cursor is {record['cursor']}, expected "
            f"{previous_cursor} + {len(messages)} messages = {previous_cursor + len(messages)}"
        )
    if checksum(record["summary"], record["cursor"], record["event_ids"]) != record["checksum"]:
        return f"version {version}'s checksum does not match its summary, cursor and event ids"
    return None


def _mark_report(mark: Mapping[str, Any], records: Sequence[ArchiveRecord]) -> VerifyReport:
    """Compare the thread state's mark with the last (already verified) record."""
    last = len(records)
    version = mark.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        return VerifyReport(
            False, last, None, f"the thread state's mark has no valid version: {version!r}"
        )
    if version > last:
        return VerifyReport(
            False,
            last,
            last + 1,
            f"version {last + 1} is missing from the archive: the thread state's mark is at "
            f"version {version} but the archive ends at version {last}",
        )
    if version < last:
        return VerifyReport(
            False,
            last,
            version + 1,
            f"the thread state disagrees with the archive: its mark is at version {version} "
            f"but the archive goes up to version {last}",
        )
    if last == 0:
        return VerifyReport(True, 0, None, None)
    record = records[-1]
    differences = [
        f"{name} {_short(mark.get(name))} in the thread state, {_short(record[name])} archived"
        for name in ("cursor", "checksum", "chain_hash")
        if mark.get(name) != record[name]
    ]
    if differences:
        return VerifyReport(
            False,
            last,
            last,
            f"the thread state disagrees with the archive at version {last}: "
            + "; ".join(differences),
        )
    return VerifyReport(True, last, None, None)


def _short(value: object) -> str:
    """A value for a reason: hashes shortened to 12 characters."""
    text = repr(value)
    return f"{text[:13]}…'" if isinstance(value, str) and len(value) > 12 else text
