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
from ctxgraph.store.namespaces import thread_archive, thread_redactions
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
    redactions: NotRequired[list[dict[str, Any]]]
    """Redactions of this record's text, oldest first: receipt, at, kind, count, before."""
    relinked: NotRequired[list[dict[str, Any]]]
    """Redactions of an earlier record that re-linked this one: receipt, at, before."""


TAMPERED = "this record was modified after it was archived"
"""How readers mark an archived record whose content no longer matches its stored hashes."""


class ArchiveConflictError(RuntimeError):
    """A different record is already archived under the same, committed, version."""


RedactionAnchors = Mapping[str, Any]
"""A thread's redaction anchors: receipt id -> ``{at, kind, versions: {"<v>": {count,
before, after}}}``, as stored in ``thread_redactions(thread_id)``."""

HASH_FIELDS = ("checksum", "chain_hash", "record_hash")
"""The hashes of a record that a redaction recomputes and its anchor records."""


@dataclass(frozen=True)
class RedactionNote:
    """One recorded redaction of an archive, as a verification reports it."""

    receipt: str
    at: str
    kind: str
    versions: tuple[int, ...]
    """The archive versions whose text it replaced (versions only re-linked are left out)."""


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of verifying an archive; names the first broken version and why.

    ``prepared`` lists the versions found above the thread's committed mark: leftovers of
    an interrupted compaction, which are not part of the history and are not verified.
    ``redactions`` lists the recorded redactions of the verified versions, oldest first.
    """

    ok: bool
    versions_checked: int
    first_broken_version: int | None
    reason: str | None
    prepared: tuple[int, ...] = ()
    redactions: tuple[RedactionNote, ...] = ()


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
        messages=serialized_messages(messages),
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


def serialized_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """``messages`` as a record stores them: the JSON the Store gives back.

    Stored so, the record hash reads the same after a round trip through the Store.
    """
    return cast(list[dict[str, Any]], _as_json(messages_to_dict(messages)))


def record_hashes(record: Mapping[str, object]) -> dict[str, object]:
    """The checksum, chain hash and record hash of ``record`` (None for a missing one)."""
    return {name: record.get(name) for name in HASH_FIELDS}


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
    records: Sequence[ArchiveRecord],
    mark: Mapping[str, Any] | None,
    anchors: RedactionAnchors | None = None,
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

    ``anchors`` are the thread's redaction anchors (see ``redaction_anchors``; None: none
    recorded). A record whose ``redactions``/``relinked`` entries each match an anchor,
    whose current hashes are the ``after`` of its latest one, verifies as intact; one
    claiming a redaction no anchor records, lacking one an anchor records, or edited
    after its redaction is broken. The report lists the redactions of the verified records.
    """
    report = _verified(records, mark, anchors or {})
    present = {_labelled(record, index + 1) for index, record in enumerate(records)}
    upto = committed_version(mark) if mark is not None else None
    versions = {version for version in present if upto is None or version <= upto}
    return replace(report, redactions=_notes(anchors or {}, versions))


def _verified(
    records: Sequence[ArchiveRecord], mark: Mapping[str, Any] | None, anchors: RedactionAnchors
) -> VerifyReport:
    """:func:`verify_records` without the list of redactions."""
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
        if problem is None:
            problem = _redaction_problem(record, anchors)
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


def verify_versioned(
    versioned: Sequence[tuple[int, ArchiveRecord]],
    mark: Mapping[str, Any] | None,
    anchors: RedactionAnchors | None = None,
) -> VerifyReport:
    """Verify the committed part of ``(version, record)`` pairs; list the prepared rest."""
    upto = committed_version(mark)
    committed = [record for version, record in versioned if upto is None or version <= upto]
    prepared = tuple(version for version, _ in versioned if upto is not None and version > upto)
    return replace(verify_records(committed, mark, anchors), prepared=prepared)


def tampered_versions(
    versioned: Sequence[tuple[int, ArchiveRecord]],
    mark: Mapping[str, Any] | None = None,
    anchors: RedactionAnchors | None = None,
) -> dict[int, str]:
    """The committed versions whose content no longer matches their stored hashes, and why.

    Each record is checked on its own (the chain hash over its messages, the checksum over
    its summary, cursor and event ids), against the record of the version before it when
    that is among ``versioned`` (link and cursor), and against ``mark`` when the mark names
    its version. Unlike :func:`verify_records`, every such record is reported, not only
    the first; a missing version is not a modified record and is left to ``verify``.
    Given ``anchors``, a record's redaction entries are checked too (as ``verify_records``
    does); without them a redacted record is judged by its hashes alone.
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
        if problem is None and anchors is not None:
            problem = _redaction_problem(record, anchors)
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


def _anchor_entry(anchor: object, version: int) -> Mapping[str, Any] | None:
    """What ``anchor`` records for ``version`` ({count, before, after}), or None."""
    versions = anchor.get("versions") if isinstance(anchor, Mapping) else None
    entry = versions.get(str(version)) if isinstance(versions, Mapping) else None
    return entry if isinstance(entry, Mapping) else None


def _claims(record: ArchiveRecord) -> list[Mapping[str, Any]] | str:
    """The record's ``redactions`` and ``relinked`` entries, or why they cannot be read."""
    fields: Mapping[str, object] = record
    claims: list[Mapping[str, Any]] = []
    for name in ("redactions", "relinked"):
        entries = fields.get(name, [])
        if not isinstance(entries, list) or not all(
            isinstance(entry, Mapping) and isinstance(entry.get("receipt"), str)
            for entry in entries
        ):
            return f"the record of version {record['version']} has no valid {name!r} field"
        claims.extend(cast(list[Mapping[str, Any]], entries))
    return claims


def _redaction_problem(record: ArchiveRecord, anchors: RedactionAnchors) -> str | None:
    """Why the record's redaction entries disagree with the thread's anchors, or None.

    Each entry must name an anchor that records this version, each such anchor must have
    an entry, and the anchors' ``after`` -> ``before`` hashes must lead back from the
    record's current hashes through all of them (the latest redaction first).
    """
    version = record["version"]
    claims = _claims(record)
    if isinstance(claims, str):
        return claims
    named = {receipt for receipt, anchor in anchors.items() if _anchor_entry(anchor, version)}
    if not claims and not named:
        return None
    if "hash_version" not in record:
        return f"version {version} claims redactions but has no record hash covering them"
    receipts = [str(claim["receipt"]) for claim in claims]
    if len(set(receipts)) != len(receipts):
        return f"version {version} names the same redaction twice"
    forged = [receipt for receipt in receipts if receipt not in named]
    if forged:
        return (
            f"version {version} claims redaction {forged[0]!r}, which no redaction anchor of "
            "the thread records (an edit passed off as a redaction)"
        )
    missing = sorted(named - set(receipts))
    if missing:
        return (
            f"version {version} has no entry for redaction {missing[0]!r}, which the "
            "thread's anchor records for it (a redaction entry was removed)"
        )
    return _unwound(version, {str(claim["receipt"]): claim for claim in claims}, record, anchors)


def _unwound(
    version: int,
    claims: dict[str, Mapping[str, Any]],
    record: ArchiveRecord,
    anchors: RedactionAnchors,
) -> str | None:
    """Walk back from the record's hashes through its redactions' anchors (None: all fit)."""
    current: object = record_hashes(record)
    while claims:
        entries = {receipt: _anchor_entry(anchors[receipt], version) or {} for receipt in claims}
        latest = next((r for r, entry in entries.items() if entry.get("after") == current), None)
        if latest is None:
            newest = max(claims, key=lambda receipt: str(anchors[receipt].get("at")))
            return (
                f"version {version} was modified after redaction {newest!r}: its hashes are "
                "not the ones the redaction's anchor recorded"
            )
        claim, entry = claims.pop(latest), entries[latest]
        anchor = anchors[latest]
        if claim.get("before") != entry.get("before") or any(
            name in claim and claim[name] != value
            for name, value in (
                ("at", anchor.get("at")),
                ("kind", anchor.get("kind")),
                ("count", entry.get("count")),
            )
        ):
            return f"version {version}'s entry for redaction {latest!r} disagrees with its anchor"
        current = entry.get("before")
    return None


def _notes(anchors: RedactionAnchors, versions: set[int]) -> tuple[RedactionNote, ...]:
    """The anchors that replaced text in any of ``versions``, oldest first."""
    notes: list[RedactionNote] = []
    for receipt, anchor in anchors.items():
        held = tuple(
            version
            for version in sorted(versions)
            if _positive((_anchor_entry(anchor, version) or {}).get("count"))
        )
        if held:
            notes.append(
                RedactionNote(
                    receipt=receipt,
                    at=str(anchor.get("at")),
                    kind=str(anchor.get("kind")),
                    versions=held,
                )
            )
    return tuple(sorted(notes, key=lambda note: (note.at, note.receipt)))


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


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
