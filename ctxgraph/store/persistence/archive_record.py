"""An archive record: its fields, its hashes, and how one is built and read back."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict, cast

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict

from ctxgraph.state.summary import chain_hash, checksum

HASH_VERSION = 2
"""The integrity rule of records written now: ``record_hash`` covers every field.

Records written before (no ``hash_version`` field, rule 1) are verified as they always
were: the chain hash covers the messages' canonical parts, the checksum the summary,
cursor and event ids; their ``created_at`` and other message details are not covered.
"""


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


HASH_FIELDS = ("checksum", "chain_hash", "record_hash")
"""The hashes of a record that a redaction recomputes and its anchor records."""


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

    Canonical: keys sorted, no whitespace, UTF-8 (a lone surrogate as its three bytes), and
    a float with an integral value written as an integer (a JSONB column may hand ``1e20``
    back as an integer).
    """
    fields = {name: value for name, value in record.items() if name != "record_hash"}
    text = json.dumps(
        _normalized(fields), ensure_ascii=False, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


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
