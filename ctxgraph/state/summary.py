"""Canonical forms, checksums and the hash chain that make compaction verifiable."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

SUMMARY_SCHEMA_VERSION = 1
"""Version of the rolling summary's shape; stored inside every summary."""

CHAIN_SEED = hashlib.sha256(b"ctxgraph/chain/v1").hexdigest()
"""The chain hash before any message was folded (the previous hash of version 1)."""


def canonical_json(value: object) -> bytes:
    """Encode ``value`` as compact, key-sorted UTF-8 JSON: one byte string per value.

    A lone surrogate is encoded as its three bytes (``surrogatepass``), so any text hashes.
    """
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass")


def checksum(summary: Mapping[str, Any], cursor: int, event_ids: list[str]) -> str:
    """SHA-256 hex of a summary together with the cursor and the ids it was folded from."""
    payload = {
        "schema_version": summary.get("schema_version"),
        "cursor": cursor,
        "event_ids": list(event_ids),
        "summary": summary,
    }
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def canonical_message(message: BaseMessage) -> dict[str, Any]:
    """The parts of a message that define it for integrity, without None or empty values."""
    tool_calls = [
        {"id": call.get("id"), "name": call["name"], "args": call["args"]}
        for call in getattr(message, "tool_calls", None) or []
    ]
    parts: dict[str, Any] = {
        "id": message.id,
        "type": message.type,
        "content": message.content,
        "name": message.name,
        "tool_calls": tool_calls,
        "tool_call_id": getattr(message, "tool_call_id", None),
        "status": getattr(message, "status", None),
    }
    return {
        key: value
        for key, value in parts.items()
        if value is not None and value != [] and value != ""
    }


def chain_hash(previous: str, messages: Sequence[BaseMessage]) -> str:
    """Extend the hash chain from ``previous`` over ``messages``, in order."""
    current = previous
    for message in messages:
        data = current.encode("ascii") + canonical_json(canonical_message(message))
        current = hashlib.sha256(data).hexdigest()
    return current
