"""The per-thread archive of folded messages in the Store, and its verification."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict, cast

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict
from langgraph.store.base import BaseStore, Item, SearchItem

from ctxgraph.state.summary import CHAIN_SEED, chain_hash, checksum
from ctxgraph.store.namespaces import thread_archive
from ctxgraph.store.persistence.listing import alist_namespace, list_namespace

PAGE_SIZE = 100
"""Items fetched per Store search while listing an archive."""

HASH_VERSION = 2
"""The integrity rule of records written now: ``record_hash`` covers every field.

Records written before (no ``hash_version`` field, rule 1) are verified as they always
were: the chain hash covers the messages' canonical parts, the checksum the summary,
cursor and event ids; their ``created_at`` and other message details are not covered.
"""

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
    hash_version: NotRequired[int]
    """The integrity rule (``HASH_VERSION``); absent on records written before rule 2."""
    record_hash: NotRequired[str]
    """Rule 2: SHA-256 of the canonical JSON of every other field (see ``record_digest``)."""


TAMPERED = "this record was modified after it was archived"
"""How readers mark an archived record whose content no longer matches its stored hashes."""


class ArchiveConflictError(RuntimeError):
    """A different record is already archived under the same, committed, version."""


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of verifying an archive; names the first broken version and why.

    ``prepared`` lists the versions found above the thread's committed mark: leftovers of
    an interrupted compaction, which are not part of the history and are not verified.
    """

    ok: bool
    versions_checked: int
    first_broken_version: int | None
    reason: str | None
    prepared: tuple[int, ...] = ()


def version_key(version: int) -> str:
    """The Store key of a compaction version, e.g. ``v000003``."""
    return f"v{version:06d}"


def build_record(
    *,
    version: int,
    messages: Sequence[BaseMessage],
    summary: Mapping[str, Any],
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
    record = ArchiveRecord(
        version=version,
        # Stored as the JSON the Store gives back, so the record hash reads the same after.
        messages=_as_json(messages_to_dict(messages)),
        event_ids=event_ids,
        cursor=cursor,
        summary=dict(summary),
        checksum=checksum(summary, cursor, event_ids),
        previous_chain_hash=previous_chain_hash,
        chain_hash=chain_hash(previous_chain_hash, messages),
        created_at=datetime.now(UTC).isoformat(),
        hash_version=HASH_VERSION,
    )
    record["record_hash"] = record_digest(record)
    return record


def record_digest(record: Mapping[str, object]) -> str:
    """SHA-256 hex over the canonical JSON of every field of ``record`` but ``record_hash``.

    Canonical: keys sorted, no whitespace, UTF-8, and a float with an integral value
    written as an integer (a JSONB column may hand ``1e20`` back as an integer).
    """
    fields = {name: value for name, value in record.items() if name != "record_hash"}
    text = json.dumps(
        _normalized(fields), ensure_ascii=False, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _as_json(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples as lists, other objects as strings)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def _normalized(value: object) -> object:
    """``value`` with integral floats as integers, for a byte-stable encoding."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(key): _normalized(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_normalized(item) for item in value]
    return value


def record_messages(record: ArchiveRecord) -> list[BaseMessage]:
    """The messages a record folded, in their original order."""
    return messages_from_dict(record["messages"])


def committed_version(mark: Mapping[str, Any] | None) -> int | None:
    """The last committed archive version a thread state's mark names (0 before any).

    The mark is the commit point: a version above it is a prepared leftover of an
    interrupted compaction, not history. None means the mark holds no valid version, so a
    reader cannot tell committed from prepared (``verify`` reports such a mark as broken).
    """
    if not mark:
        return 0
    version = mark.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        return None
    return version


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
            self.store.put(self.namespace, key, dict(record), index=False)

    async def aput(self, record: ArchiveRecord, *, committed_version: int | None = None) -> None:
        """Async :meth:`put`."""
        key = version_key(record["version"])
        existing = await self.store.aget(self.namespace, key)
        if not _already_stored(record, existing, _prepared(record, committed_version)):
            await self.store.aput(self.namespace, key, dict(record), index=False)

    def get(self, version: int) -> ArchiveRecord | None:
        """The record stored under ``version``, or None."""
        item = self.store.get(self.namespace, version_key(version))
        return None if item is None else cast(ArchiveRecord, item.value)

    async def aget(self, version: int) -> ArchiveRecord | None:
        """Async :meth:`get`."""
        item = await self.store.aget(self.namespace, version_key(version))
        return None if item is None else cast(ArchiveRecord, item.value)

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
                found[int(match.group(1))] = cast(ArchiveRecord, item.value)
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


def verify_records(
    records: Sequence[ArchiveRecord], mark: Mapping[str, Any] | None
) -> VerifyReport:
    """Verify records given in archive order (ascending versions 1..N), then the mark.

    Reports the first problem found; ``versions_checked`` counts the versions found intact
    before it. The mark is the thread state's {version, cursor, checksum, chain_hash}.
    Given a mark, the records above its version are *prepared* leftovers of an interrupted
    compaction, as ``ctxgraph threads verify`` reports them: listed in ``prepared``, not
    verified, and not a break. Without a mark every record is verified.

    A record with ``hash_version`` 2 must also match its ``record_hash``, which covers every
    field (``created_at`` included); a record without ``hash_version`` (written before) is
    verified by the older rule, unless an earlier record of the chain has one: a chain
    never goes back to the older rule, so stripping the fields of a newer record shows.
    """
    prepared: tuple[int, ...] = ()
    upto = committed_version(mark) if mark is not None else None
    if upto is not None:
        prepared = tuple(
            _labelled(record, index + 1)
            for index, record in enumerate(records)
            if _labelled(record, index + 1) > upto
        )
        records = [
            record for index, record in enumerate(records) if _labelled(record, index + 1) <= upto
        ]
    present = {record.get("version") for record in records}
    previous_hash, previous_cursor = CHAIN_SEED, 0
    full_coverage = False
    for index, record in enumerate(records):
        expected = index + 1
        problem = _record_problem(record, expected, present, previous_hash, previous_cursor)
        if problem is None and full_coverage and "hash_version" not in record:
            problem = _downgraded(expected)
        if problem is not None:
            return VerifyReport(False, index, expected, problem, prepared)
        previous_hash, previous_cursor = record["chain_hash"], record["cursor"]
        full_coverage = full_coverage or "hash_version" in record
    if mark is None:
        return VerifyReport(True, len(records), None, None)
    return replace(_mark_report(mark, records), prepared=prepared)


def _labelled(record: Mapping[str, object], position: int) -> int:
    """The version a record is labelled with, or its position when the label is invalid."""
    version = record.get("version")
    if isinstance(version, int) and not isinstance(version, bool):
        return version
    return position


def _downgraded(version: int) -> str:
    return (
        f"version {version} has no record hash although an earlier version has one "
        "(its 'hash_version' and 'record_hash' fields were removed)"
    )


def verify_thread(store: BaseStore, thread_id: str, mark: Mapping[str, Any] | None) -> VerifyReport:
    """Verify the archive of ``thread_id`` in ``store`` against the thread state's mark.

    Versions above the mark are prepared leftovers: listed in ``prepared``, not verified.
    """
    return verify_versioned(ThreadArchive(store, thread_id).versioned(), mark)


async def averify_thread(
    store: BaseStore, thread_id: str, mark: Mapping[str, Any] | None
) -> VerifyReport:
    """Async :func:`verify_thread`."""
    return verify_versioned(await ThreadArchive(store, thread_id).aversioned(), mark)


def verify_versioned(
    versioned: Sequence[tuple[int, ArchiveRecord]], mark: Mapping[str, Any] | None
) -> VerifyReport:
    """Verify the committed part of ``(version, record)`` pairs; list the prepared rest."""
    upto = committed_version(mark)
    committed = [record for version, record in versioned if upto is None or version <= upto]
    prepared = tuple(version for version, _ in versioned if upto is not None and version > upto)
    return replace(verify_records(committed, mark), prepared=prepared)


def tampered_versions(
    versioned: Sequence[tuple[int, ArchiveRecord]], mark: Mapping[str, Any] | None = None
) -> dict[int, str]:
    """The committed versions whose content no longer matches their stored hashes, and why.

    Each record is checked on its own (the chain hash over its messages, the checksum over
    its summary, cursor and event ids), against the record of the version before it when
    that is among ``versioned`` (link and cursor), and against ``mark`` when the mark names
    its version. Unlike :func:`verify_records`, every such record is reported, not only
    the first; a missing version is not a modified record and is left to ``verify``.
    """
    present = {version for version, _ in versioned}
    problems: dict[int, str] = {}
    before: dict[int, ArchiveRecord] = dict(versioned)
    for version, record in versioned:
        previous_hash, previous_cursor = _link(before.get(version - 1), version)
        problem = _record_problem(record, version, present, previous_hash, previous_cursor)
        previous: Mapping[str, object] = before.get(version - 1) or {}
        if problem is None and "hash_version" in previous and "hash_version" not in record:
            problem = _downgraded(version)
        if problem is None and mark is not None and mark.get("version") == version:
            problem = _mark_difference(mark, record)
        if problem is not None:
            problems[version] = problem
    return problems


def _link(previous: ArchiveRecord | None, version: int) -> tuple[str | None, int | None]:
    """Chain hash and cursor a record of ``version`` must continue (None: cannot tell)."""
    if version == 1:
        return CHAIN_SEED, 0
    if previous is None:
        return None, None
    fields: Mapping[str, object] = previous
    chain, cursor = fields.get("chain_hash"), fields.get("cursor")
    if not isinstance(chain, str) or not isinstance(cursor, int) or isinstance(cursor, bool):
        return None, None
    return chain, cursor


def _mark_difference(mark: Mapping[str, Any], record: ArchiveRecord) -> str | None:
    """How the mark disagrees with the record of its version, or None."""
    differences = [
        f"{name} {_short(mark.get(name))} in the thread state, {_short(record[name])} archived"
        for name in ("cursor", "checksum", "chain_hash")
        if mark.get(name) != record[name]
    ]
    if not differences:
        return None
    return f"the thread state disagrees with version {record['version']}: " + "; ".join(differences)


def _record_problem(
    record: ArchiveRecord,
    expected: int,
    present: set[int],
    previous_hash: str | None,
    previous_cursor: int | None,
) -> str | None:
    """Why the record in place of version ``expected`` is broken, or None if it is intact.

    A None ``previous_hash``/``previous_cursor`` (the version before is not at hand) checks
    the record against its own ``previous_chain_hash``, and skips the cursor's link.
    """
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
    if previous_hash is None:
        previous_hash = record["previous_chain_hash"]
    if record["previous_chain_hash"] != previous_hash:
        before = "the chain seed" if version == 1 else f"version {version - 1}'s chain hash"
        return f"version {version} does not link to {before} (previous_chain_hash differs)"
    try:
        messages = record_messages(record)
    except (KeyError, TypeError, ValueError) as error:
        return f"version {version}'s messages cannot be read: {error}"
    if previous_cursor is None:
        previous_cursor = record["cursor"] - len(messages)
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
    return _coverage_problem(record)


def _coverage_problem(record: ArchiveRecord) -> str | None:
    """Rule 2: why ``record_hash`` does not cover the record's fields, or None.

    A record without ``hash_version`` was written under rule 1, fully checked above.
    """
    fields: Mapping[str, object] = record
    if "hash_version" not in fields:
        return None
    version = record["version"]
    rule = fields.get("hash_version")
    if rule != HASH_VERSION or isinstance(rule, bool):
        return f"version {version} has an unknown hash_version {rule!r} (expected {HASH_VERSION})"
    if not isinstance(fields.get("created_at"), str):
        return f"the record of version {version} has no valid 'created_at' field"
    stored = fields.get("record_hash")
    if not isinstance(stored, str):
        return f"the record of version {version} has no valid 'record_hash' field"
    if record_digest(record) != stored:
        return (
            f"version {version}'s record hash does not match its fields "
            "(a field such as created_at was edited, added or removed)"
        )
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
