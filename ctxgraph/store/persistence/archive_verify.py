"""Verifying an archive: each record's hashes, the hash chain, and the thread state's mark."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.messages import BaseMessage

from ctxgraph.state.summary import CHAIN_SEED, chain_hash, checksum
from ctxgraph.store.persistence.archive_record import (
    HASH_VERSION,
    ArchiveRecord,
    committed_version,
    record_digest,
    record_messages,
)
from ctxgraph.store.persistence.archive_redaction_checks import (
    RedactionAnchors,
    RedactionNote,
    redaction_notes,
    redaction_problem,
)

TAMPERED = "this record was modified after it was archived"
"""How readers mark an archived record whose content no longer matches its stored hashes."""

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
    return replace(report, redactions=redaction_notes(anchors or {}, versions))


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
    before: dict[int, ArchiveRecord] = dict(versioned)
    problems: dict[int, str] = {}
    for version, record in versioned:
        problem = _tampering(record, version, present, before.get(version - 1), anchors)
        if problem is None and mark is not None and mark.get("version") == version:
            problem = _mark_difference(mark, record)
        if problem is not None:
            problems[version] = problem
    return problems


def _tampering(
    record: ArchiveRecord,
    version: int,
    present: set[int],
    previous: ArchiveRecord | None,
    anchors: RedactionAnchors | None,
) -> str | None:
    """Why the record of ``version`` no longer matches its hashes (``tampered_versions``)."""
    previous_hash, previous_cursor = _link(previous, version)
    problem = _record_problem(record, version, present, previous_hash, previous_cursor)
    fields: Mapping[str, object] = previous or {}
    if problem is None and "hash_version" in fields and "hash_version" not in record:
        problem = _downgraded(version)
    if problem is None and anchors is not None:
        problem = redaction_problem(record, anchors)
    return problem


def _verified(
    records: Sequence[ArchiveRecord], mark: Mapping[str, Any] | None, anchors: RedactionAnchors
) -> VerifyReport:
    """:func:`verify_records` without the list of redactions."""
    records, prepared = _committed_part(records, mark)
    present = {record.get("version") for record in records}
    previous_hash, previous_cursor = CHAIN_SEED, 0
    full_coverage = False
    for index, record in enumerate(records):
        expected = index + 1
        problem = _record_problem(record, expected, present, previous_hash, previous_cursor)
        if problem is None and full_coverage and "hash_version" not in record:
            problem = _downgraded(expected)
        if problem is None:
            problem = redaction_problem(record, anchors)
        if problem is not None:
            return VerifyReport(False, index, expected, problem, prepared)
        previous_hash, previous_cursor = record["chain_hash"], record["cursor"]
        full_coverage = full_coverage or "hash_version" in record
    if mark is None:
        return VerifyReport(True, len(records), None, None)
    return replace(_mark_report(mark, records), prepared=prepared)


def _committed_part(
    records: Sequence[ArchiveRecord], mark: Mapping[str, Any] | None
) -> tuple[Sequence[ArchiveRecord], tuple[int, ...]]:
    """The records at or below the mark's version, and the versions of those above it."""
    upto = committed_version(mark) if mark is not None else None
    if upto is None:
        return records, ()
    labelled = [(_labelled(record, index + 1), record) for index, record in enumerate(records)]
    prepared = tuple(version for version, _ in labelled if version > upto)
    return [record for version, record in labelled if version <= upto], prepared


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
    problem = _shape_problem(record, expected, present)
    if problem is not None:
        return problem
    version = record["version"]
    if previous_hash is None:
        previous_hash = record["previous_chain_hash"]
    if record["previous_chain_hash"] != previous_hash:
        before = "the chain seed" if version == 1 else f"version {version - 1}'s chain hash"
        return f"version {version} does not link to {before} (previous_chain_hash differs)"
    try:
        messages = record_messages(record)
    except (KeyError, TypeError, ValueError) as error:
        return f"version {version}'s messages cannot be read: {error}"
    return _folded_problem(record, messages, previous_hash, previous_cursor) or _coverage_problem(
        record
    )


def _shape_problem(record: ArchiveRecord, expected: int, present: set[int]) -> str | None:
    """Why the record is not a well-formed record labelled ``expected``, or None."""
    fields: Mapping[str, object] = record
    for name, kind in _FIELD_TYPES.items():
        if not isinstance(fields.get(name), kind) or isinstance(fields.get(name), bool):
            return f"the record of version {expected} has no valid {name!r} field"
    version = record["version"]
    if version == expected:
        return None
    if version > expected and expected not in present:
        return f"version {expected} is missing from the archive"
    return (
        f"the record in place of version {expected} is labelled version {version} "
        "(records swapped, reordered or relabelled)"
    )


def _folded_problem(
    record: ArchiveRecord,
    messages: Sequence[BaseMessage],
    previous_hash: str,
    previous_cursor: int | None,
) -> str | None:
    """Why the record's hashes, ids or cursor do not match the messages it folded, or None."""
    version = record["version"]
    if chain_hash(previous_hash, messages) != record["chain_hash"]:
        return (
            f"version {version}'s messages do not match its chain hash "
            "(messages edited, added, dropped or reordered)"
        )
    if record["event_ids"] != [message.id for message in messages]:
        return f"version {version}'s event_ids do not match the ids of its messages"
    if previous_cursor is None:
        previous_cursor = record["cursor"] - len(messages)
    if record["cursor"] != previous_cursor + len(messages):
        return (
            f"version {version}'s cursor is {record['cursor']}, expected "
            f"{previous_cursor} + {len(messages)} messages = {previous_cursor + len(messages)}"
        )
    if checksum(record["summary"], record["cursor"], record["event_ids"]) != record["checksum"]:
        return f"version {version}'s checksum does not match its summary, cursor and event ids"
    return None


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


def _differences(mark: Mapping[str, Any], record: ArchiveRecord) -> list[str]:
    """The fields on which the mark and the record of its version disagree, as phrases."""
    return [
        f"{name} {_short(mark.get(name))} in the thread state, {_short(record[name])} archived"
        for name in ("cursor", "checksum", "chain_hash")
        if mark.get(name) != record[name]
    ]


def _mark_difference(mark: Mapping[str, Any], record: ArchiveRecord) -> str | None:
    """How the mark disagrees with the record of its version, or None."""
    differences = _differences(mark, record)
    if not differences:
        return None
    return f"the thread state disagrees with version {record['version']}: " + "; ".join(differences)


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
    differences = _differences(mark, records[-1]) if last else []
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
