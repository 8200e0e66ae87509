"""Redacting a thread's compaction archive so that it still verifies, as a recorded redaction.

Forgotten text is replaced in the archived messages (read as messages, so ids, types,
names and tool-call ids never change) and in the summaries. Each redacted record gets new
hashes (checksum, chain hash, record hash) and a ``redactions`` entry naming the receipt
and its hashes before; every later record is re-linked to the new chain and gets a
``relinked`` entry. An anchor item per redaction, in ``thread_redactions(thread_id)``
keyed by the receipt id, records each changed version's hashes before and after, so
``verify`` tells a recorded redaction from an edit (see ``verify_records``).

A redaction never launders a break: from the first version that did not verify before,
text is replaced but the stored hashes are kept, so the archive still reports the break.
Prepared leftovers above the thread's mark (not history) have their text replaced and
hashes recomputed, re-linked to the redacted chain, without entries or anchors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.messages import messages_from_dict
from langgraph.store.base import BaseStore, PutOp

from ctxgraph.state.summary import CHAIN_SEED, chain_hash, checksum
from ctxgraph.store.namespaces import thread_archive, thread_redactions
from ctxgraph.store.persistence.archive import (
    HASH_VERSION,
    ArchiveRecord,
    RedactionAnchors,
    ThreadArchive,
    aredaction_anchors,
    committed_version,
    record_digest,
    record_hashes,
    record_messages,
    redaction_anchors,
    serialized_messages,
    verify_versioned,
    version_key,
)
from ctxgraph.store.redaction import Redactor
from ctxgraph.store.text_codec import encoded

__all__ = ["ArchiveRedaction", "ReceiptReusedError", "aredact_archive", "redact_archive"]


class ReceiptReusedError(ValueError):
    """The thread's archive already holds a redaction under the given receipt id."""


@dataclass(frozen=True)
class ArchiveRedaction:
    """What redacting one thread's archive replaced (or, in a dry run, would replace).

    Attributes:
        counts: archive version -> occurrences replaced, for the versions that held
            the text (prepared leftovers included).
        mark: the thread state's new mark (the old one with the checksum and chain hash
            of its version recomputed); None when the mark does not change, and in a
            dry run.
        prepared: the versions of ``counts`` that are prepared leftovers above the mark.
        unverified: the versions of ``counts`` at or after a break the archive already
            had: their text was replaced, their stored hashes kept, so the break shows.

    """

    counts: dict[int, int]
    mark: dict[str, Any] | None
    prepared: tuple[int, ...] = ()
    unverified: tuple[int, ...] = ()


@dataclass
class _Plan:
    """The records to write and the anchor to store for one redaction."""

    stamp: dict[str, Any]
    """The start of every entry this redaction adds to a record: its receipt and time."""
    kind: str
    writes: dict[int, ArchiveRecord] = field(default_factory=dict)
    anchor_versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    prepared: list[int] = field(default_factory=list)
    unverified: list[int] = field(default_factory=list)
    moved: dict[str, str] = field(default_factory=dict)
    """Old chain hash -> new one, for records that link to a record this plan changed."""


def redact_archive(
    store: BaseStore,
    thread_id: str,
    redactor: Redactor,
    mark: Mapping[str, Any] | None,
    *,
    receipt_id: str,
    at: str,
    dry_run: bool = False,
) -> ArchiveRedaction:
    """Replace the redactor's text in every archived record of ``thread_id``, verifiably.

    Args:
        store: the Store holding the thread's archive.
        thread_id: the thread whose archive is redacted.
        redactor: what to replace.
        mark: the thread state's ``compaction`` mark (None: no version is committed, so
            every record is a prepared leftover).
        receipt_id: the forget's receipt id; keys the anchor, named by the records.
        at: when, as an ISO 8601 time; recorded in the entries and the anchor.
        dry_run: count only, write nothing.

    Returns:
        The counts per version and the thread state's new mark, which the caller must
        write to the thread state (the archive verifies against it, not the old one).

    Raises:
        ReceiptReusedError: the archive already holds a redaction under ``receipt_id``.

    """
    versioned = ThreadArchive(store, thread_id).versioned()
    anchors = redaction_anchors(store, thread_id)
    plan = _planned(versioned, mark, anchors, redactor, receipt_id, at)
    if not dry_run and plan.writes:
        _check_receipt(anchors, receipt_id)
        store.batch(_operations(thread_id, plan, redactor, receipt_id, at))
    return _outcome(plan, mark, dry_run)


async def aredact_archive(
    store: BaseStore,
    thread_id: str,
    redactor: Redactor,
    mark: Mapping[str, Any] | None,
    *,
    receipt_id: str,
    at: str,
    dry_run: bool = False,
) -> ArchiveRedaction:
    """Async :func:`redact_archive`."""
    versioned = await ThreadArchive(store, thread_id).aversioned()
    anchors = await aredaction_anchors(store, thread_id)
    plan = _planned(versioned, mark, anchors, redactor, receipt_id, at)
    if not dry_run and plan.writes:
        _check_receipt(anchors, receipt_id)
        await store.abatch(_operations(thread_id, plan, redactor, receipt_id, at))
    return _outcome(plan, mark, dry_run)


def _check_receipt(anchors: RedactionAnchors, receipt_id: str) -> None:
    if receipt_id in anchors:
        raise ReceiptReusedError(
            f"the archive already holds a redaction with receipt id {receipt_id!r}; "
            "each redaction needs a new receipt id"
        )


def _planned(
    versioned: Sequence[tuple[int, ArchiveRecord]],
    mark: Mapping[str, Any] | None,
    anchors: RedactionAnchors,
    redactor: Redactor,
    receipt_id: str,
    at: str,
) -> _Plan:
    """Every record to rewrite, oldest first, with its new hashes and entries."""
    plan = _Plan(stamp={"receipt": receipt_id, "at": at}, kind=redactor.kind)
    upto = committed_version(mark)
    broken_from = _first_unverified(versioned, mark, anchors)
    previous = CHAIN_SEED
    for version, record in versioned:
        redacted, count = _redacted_content(record, redactor)
        if count:
            plan.counts[version] = count
        if upto is not None and version > upto:
            _plan_leftover(plan, version, record, redacted, count)
        elif broken_from is not None and version >= broken_from:
            if count:  # the text is replaced, the stored hashes kept: the break still shows
                plan.writes[version] = redacted
                plan.unverified.append(version)
        elif count or plan.moved:
            _plan_rewrite(plan, version, record, redacted, count, previous)
        previous = plan.writes.get(version, record)["chain_hash"]
    return plan


def _first_unverified(
    versioned: Sequence[tuple[int, ArchiveRecord]],
    mark: Mapping[str, Any] | None,
    anchors: RedactionAnchors,
) -> int | None:
    """The first version that does not verify before the redaction (None: all verify)."""
    before = verify_versioned(versioned, mark, anchors)
    return None if before.ok else (before.first_broken_version or 1)


def _plan_rewrite(
    plan: _Plan,
    version: int,
    record: ArchiveRecord,
    redacted: ArchiveRecord,
    count: int,
    previous: str,
) -> None:
    """A committed record: rehashed onto the chain, with an entry and an anchor version.

    A record whose text changed gets a ``redactions`` entry; one only re-linked (a record
    before it changed) gets a ``relinked`` entry.
    """
    new = _rehashed(redacted, previous)
    entry: dict[str, Any] = dict(plan.stamp)
    if count:
        entry.update(kind=plan.kind, count=count)
    entry["before"] = record_hashes(record)
    name = "redactions" if count else "relinked"
    fields = cast(dict[str, Any], new)
    fields[name] = [*fields.get(name, []), entry]
    new["record_hash"] = record_digest(new)
    plan.writes[version] = new
    plan.anchor_versions[str(version)] = {
        "count": count,
        "before": record_hashes(record),
        "after": record_hashes(new),
    }
    plan.moved[record["chain_hash"]] = new["chain_hash"]


def _plan_leftover(
    plan: _Plan, version: int, record: ArchiveRecord, redacted: ArchiveRecord, count: int
) -> None:
    """A prepared leftover: text replaced, hashes recomputed, linked to the new chain."""
    link = plan.moved.get(record["previous_chain_hash"])
    if not count and link is None:
        return
    if count:
        plan.prepared.append(version)
    try:
        new = _rehashed(redacted, link or record["previous_chain_hash"])
    except (KeyError, TypeError, ValueError):  # a damaged leftover: replace the text only
        plan.writes[version] = redacted
        return
    new["record_hash"] = record_digest(new)
    plan.writes[version] = new
    plan.moved[record["chain_hash"]] = new["chain_hash"]


def _rehashed(record: ArchiveRecord, previous_chain_hash: str) -> ArchiveRecord:
    """``record`` linked to ``previous_chain_hash``, with its checksum and chain recomputed.

    The record is upgraded to ``HASH_VERSION``; its ``record_hash`` is left to the caller.
    """
    new = cast(ArchiveRecord, dict(record))
    new["previous_chain_hash"] = previous_chain_hash
    new["chain_hash"] = chain_hash(previous_chain_hash, record_messages(new))
    new["checksum"] = checksum(new["summary"], new["cursor"], new["event_ids"])
    new["hash_version"] = HASH_VERSION
    return new


def _redacted_content(record: ArchiveRecord, redactor: Redactor) -> tuple[ArchiveRecord, int]:
    """``record`` with its messages and summary redacted, and the occurrences replaced.

    Each message is read as a message and redacted as one, so only its text changes; a
    message that cannot be read (a damaged record) is redacted as plain JSON. Unchanged
    messages keep their stored form. The hashes are not touched.
    """
    fields: Mapping[str, object] = record
    total = 0
    messages: list[Any] = []
    stored = fields.get("messages")
    for item in stored if isinstance(stored, list) else []:
        redacted, count = _redacted_message(item, redactor)
        messages.append(redacted)
        total += count
    summary, count = redactor.value(fields.get("summary"))
    total += count
    if not total:
        return record, 0
    new = cast(ArchiveRecord, dict(record))
    new["messages"] = messages
    new["summary"] = summary
    return new, total


def _redacted_message(item: Any, redactor: Redactor) -> tuple[Any, int]:
    try:
        message = messages_from_dict([item])[0]
    except (KeyError, TypeError, ValueError):
        return redactor.value(item)
    redacted, count = redactor.value(message)
    if not count:
        return item, 0
    return serialized_messages([redacted])[0], count


def _operations(
    thread_id: str, plan: _Plan, redactor: Redactor, receipt_id: str, at: str
) -> list[PutOp]:
    """The Store writes of a plan: the records, oldest first, then the anchor."""
    archive = thread_archive(thread_id)
    operations = [
        PutOp(archive, version_key(version), encoded(dict(record)), index=False)
        for version, record in sorted(plan.writes.items())
    ]
    if plan.anchor_versions:
        anchor = {"at": at, "kind": redactor.kind, "versions": plan.anchor_versions}
        operations.append(PutOp(thread_redactions(thread_id), receipt_id, anchor, index=False))
    return operations


def _outcome(plan: _Plan, mark: Mapping[str, Any] | None, dry_run: bool) -> ArchiveRedaction:
    """The result of a plan; the new mark only when its version's hashes changed."""
    version = committed_version(mark)
    new_mark: dict[str, Any] | None = None
    if not dry_run and mark and version and str(version) in plan.anchor_versions:
        record = plan.writes[version]
        new_mark = {**mark, "checksum": record["checksum"], "chain_hash": record["chain_hash"]}
    return ArchiveRedaction(
        counts=dict(plan.counts),
        mark=new_mark,
        prepared=tuple(plan.prepared),
        unverified=tuple(plan.unverified),
    )
