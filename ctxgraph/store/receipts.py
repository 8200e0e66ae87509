"""Receipts of forgets and user deletions: each place touched, how much, and when.

A receipt never holds the text it removed: each place is named by its kind and where it
is (a namespace and key, a thread id, an archive version), and what was removed is named
by the SHA-256 of the removed text. A dry run builds the same receipt without storing it.

Forget receipts live in ``forget_receipts(user_id)``; the receipt of a deleted user lives
in ``deletion_receipts()`` and names the user by the hash of its id only.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from langgraph.store.base import BaseStore

from ctxgraph.store.namespaces import deletion_receipts, forget_receipts

__all__ = [
    "DELETE_USER",
    "FORGET",
    "Place",
    "Receipt",
    "astore_receipt",
    "new_receipt",
    "new_receipt_id",
    "receipt_namespace",
    "receipt_time",
    "store_receipt",
    "subject_digest",
]

FORGET = "forget"
"""The action of a receipt left by ``forget``."""

DELETE_USER = "delete user"
"""The action of a receipt left by a user deletion."""


def subject_digest(user_id: str) -> str:
    """SHA-256 hex of a user id: how a deletion receipt names the user it deleted."""
    return hashlib.sha256(user_id.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Place:
    """One place a forget or deletion touched.

    Attributes:
        kind: what lives there, e.g. ``"memory fact"``, ``"archive record"``.
        where: a namespace and key, a thread id or an archive version; never the
            removed text.
        count: occurrences replaced, or rows deleted.

    """

    kind: str
    where: str
    count: int

    def as_dict(self) -> dict[str, object]:
        """The place as plain JSON."""
        return {"kind": self.kind, "where": self.where, "count": self.count}


@dataclass(frozen=True)
class Receipt:
    """What a forget or a user deletion did (or, for a dry run, would do).

    Attributes:
        action: ``FORGET`` or ``DELETE_USER``.
        subject: the user id for a forget; the user id's digest for a deletion.
        digest: SHA-256 hex of what was removed (the forgotten text, or the user id).
        at: when, as an ISO 8601 UTC time.
        dry_run: True when nothing was changed.
        places: every place touched, in the order they were visited.
        id: the key the receipt is stored under.
        skipped: what could not be reached now, and why (a busy thread); running the
            same forget again finishes it.

    """

    action: str
    subject: str
    digest: str
    at: str
    dry_run: bool
    places: tuple[Place, ...]
    id: str
    skipped: tuple[str, ...] = ()

    def total(self) -> int:
        """The sum of the places' counts."""
        return sum(place.count for place in self.places)

    def as_dict(self) -> dict[str, object]:
        """The receipt as plain JSON (what is stored)."""
        return {
            "id": self.id,
            "action": self.action,
            "subject": self.subject,
            "digest": self.digest,
            "at": self.at,
            "dry_run": self.dry_run,
            "total": self.total(),
            "places": [place.as_dict() for place in self.places],
            "skipped": list(self.skipped),
        }

    def lines(self) -> list[str]:
        """What the command line prints: a header, one line per place, then the total."""
        verb = "would remove" if self.dry_run else "removed"
        head = f"{self.action} {self.subject} at {self.at} (digest sha256:{self.digest[:16]}…)"
        skipped = [f"  skipped {line}" for line in self.skipped]
        again = f"{len(self.skipped)} skipped: run it again once they are free"
        if not self.places:
            return [head, *skipped, f"nothing removed; {again}" if skipped else "nothing found"]
        body = [f"  {place.kind} {place.where}: {place.count}" for place in self.places]
        places = "place" if len(self.places) == 1 else "places"
        tail = f"{verb} {self.total()} in {len(self.places)} {places}"
        if not self.dry_run:
            tail += f"; receipt {self.id}"
        if self.skipped:
            tail += f"; {again}"
        return [head, *body, *skipped, tail]


def new_receipt(
    action: str,
    subject: str,
    digest: str,
    places: Sequence[Place],
    *,
    dry_run: bool,
    receipt_id: str | None = None,
    at: str | None = None,
    skipped: Sequence[str] = (),
) -> Receipt:
    """A receipt; places with a count of 0 are left out.

    ``receipt_id`` and ``at`` default to a fresh id and now; a forget picks them before
    it starts, because the archive records it redacts name the receipt.
    """
    return Receipt(
        action=action,
        subject=subject,
        digest=digest,
        at=at or receipt_time(),
        dry_run=dry_run,
        places=tuple(place for place in places if place.count),
        id=receipt_id or new_receipt_id(),
        skipped=tuple(skipped),
    )


def receipt_time() -> str:
    """Now, as a receipt states it (ISO 8601, UTC, seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_receipt_id() -> str:
    """A fresh receipt id."""
    return uuid.uuid4().hex


def receipt_namespace(receipt: Receipt) -> tuple[str, ...]:
    """Where ``receipt`` is stored: the user's forget receipts, or the deletion receipts."""
    if receipt.action == DELETE_USER:
        return deletion_receipts()
    return forget_receipts(receipt.subject)


def store_receipt(store: BaseStore, receipt: Receipt) -> str:
    """Store ``receipt`` (not a dry run's) and return its key."""
    if not receipt.dry_run:
        store.put(receipt_namespace(receipt), receipt.id, receipt.as_dict(), index=False)
    return receipt.id


async def astore_receipt(store: BaseStore, receipt: Receipt) -> str:
    """Async :func:`store_receipt`."""
    if not receipt.dry_run:
        await store.aput(receipt_namespace(receipt), receipt.id, receipt.as_dict(), index=False)
    return receipt.id
