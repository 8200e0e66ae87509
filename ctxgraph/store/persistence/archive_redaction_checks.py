"""Whether an archive record's redaction entries agree with the thread's redaction anchors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from ctxgraph.store.persistence.archive_record import ArchiveRecord, record_hashes

RedactionAnchors = Mapping[str, Any]
"""A thread's redaction anchors: receipt id -> ``{at, kind, versions: {"<v>": {count,
before, after}}}``, as stored in ``thread_redactions(thread_id)``."""


@dataclass(frozen=True)
class RedactionNote:
    """One recorded redaction of an archive, as a verification reports it."""

    receipt: str
    at: str
    kind: str
    versions: tuple[int, ...]
    """The archive versions whose text it replaced (versions only re-linked are left out)."""


def anchor_entry(anchor: object, version: int) -> Mapping[str, Any] | None:
    """What ``anchor`` records for ``version`` ({count, before, after}), or None."""
    versions = anchor.get("versions") if isinstance(anchor, Mapping) else None
    entry = versions.get(str(version)) if isinstance(versions, Mapping) else None
    return entry if isinstance(entry, Mapping) else None


def redaction_problem(record: ArchiveRecord, anchors: RedactionAnchors) -> str | None:
    """Why the record's redaction entries disagree with the thread's anchors, or None.

    Each entry must name an anchor that records this version, each such anchor must have
    an entry, and the anchors' ``after`` -> ``before`` hashes must lead back from the
    record's current hashes through all of them (the latest redaction first).
    """
    version = record["version"]
    claims = _claims(record)
    if isinstance(claims, str):
        return claims
    named = {receipt for receipt, anchor in anchors.items() if anchor_entry(anchor, version)}
    if not claims and not named:
        return None
    if "hash_version" not in record:
        return f"version {version} claims redactions but has no record hash covering them"
    receipts = [str(claim["receipt"]) for claim in claims]
    problem = _receipts_problem(version, receipts, named)
    if problem is not None:
        return problem
    return _unwound(version, {str(claim["receipt"]): claim for claim in claims}, record, anchors)


def redaction_notes(anchors: RedactionAnchors, versions: set[int]) -> tuple[RedactionNote, ...]:
    """The anchors that replaced text in any of ``versions``, oldest first."""
    notes: list[RedactionNote] = []
    for receipt, anchor in anchors.items():
        held = tuple(
            version
            for version in sorted(versions)
            if _positive((anchor_entry(anchor, version) or {}).get("count"))
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


def _receipts_problem(version: int, receipts: list[str], named: set[str]) -> str | None:
    """Why the receipts a record names differ from those whose anchors record it, or None."""
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
    return None


def _unwound(
    version: int,
    claims: dict[str, Mapping[str, Any]],
    record: ArchiveRecord,
    anchors: RedactionAnchors,
) -> str | None:
    """Walk back from the record's hashes through its redactions' anchors (None: all fit)."""
    current: object = record_hashes(record)
    while claims:
        entries = {receipt: anchor_entry(anchors[receipt], version) or {} for receipt in claims}
        latest = next((r for r, entry in entries.items() if entry.get("after") == current), None)
        if latest is None:
            newest = max(claims, key=lambda receipt: str(anchors[receipt].get("at")))
            return (
                f"version {version} was modified after redaction {newest!r}: its hashes are "
                "not the ones the redaction's anchor recorded"
            )
        claim, entry = claims.pop(latest), entries[latest]
        if _disagrees(claim, entry, anchors[latest]):
            return f"version {version}'s entry for redaction {latest!r} disagrees with its anchor"
        current = entry.get("before")
    return None


def _disagrees(
    claim: Mapping[str, Any], entry: Mapping[str, Any], anchor: Mapping[str, Any]
) -> bool:
    """Whether a record's redaction entry differs from what its anchor records."""
    if claim.get("before") != entry.get("before"):
        return True
    return any(
        name in claim and claim[name] != value
        for name, value in (
            ("at", anchor.get("at")),
            ("kind", anchor.get("kind")),
            ("count", entry.get("count")),
        )
    )


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
