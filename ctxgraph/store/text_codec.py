"""Any text in a Store value, NUL and lone surrogates included: written reversibly, read exactly.

Postgres ``jsonb`` cannot hold NUL (U+0000), nor a surrogate (U+D800-U+DFFF) that stands
alone in a Python string. A string holding either, or ``MARKER`` (U+FDD0, a Unicode
noncharacter), is stored as ``MARKER`` followed by the string with each such code point
written as ``MARKER`` and four lowercase hex digits; any other string is stored unchanged,
so values written before this codec, and every clean value, read and hash as they always
did. Decoding undoes it exactly, and must run once per read: a decoded text that begins
with ``MARKER`` would be decoded again.

Each record ctxgraph keeps in the Store is encoded where it is handed to the Store and
decoded where it is read back: archive records (``ThreadArchive``, the archive's
redaction), facts and the profile (written by ``memory.writes``, ``memory.writer`` and
``memory.bundle``, read by ``store.facts.parse_fact`` and ``parse_profile``), the memory
queue, processed-message records, background compaction results and artifact bodies.
Hashes are taken over the decoded text (``state.summary.canonical_json``), so a record
verifies the same however it is stored.
"""

from __future__ import annotations

import re
from typing import TypeVar

from ctxgraph.state.messages import map_text

__all__ = ["MARKER", "decode_text", "decoded", "encode_text", "encoded"]

MARKER = "\ufdd0"
"""Starts an encoded string and each escaped code point in it."""

_ESCAPE = re.compile("[\x00\ud800-\udfff\ufdd0]")
_ESCAPED = re.compile("\ufdd0([0-9a-f]{4})")

V = TypeVar("V")


def encode_text(text: str) -> str:
    """``text`` as the Store keeps it (``text`` itself when it needs no escape)."""
    if _ESCAPE.search(text) is None:
        return text
    return MARKER + _ESCAPE.sub(lambda found: f"{MARKER}{ord(found[0]):04x}", text)


def decode_text(text: str) -> str:
    """The text ``encode_text`` stored as ``text``."""
    if not text.startswith(MARKER):
        return text
    return _ESCAPED.sub(lambda found: chr(int(found[1], 16)), text[1:])


def encoded(value: V) -> V:
    """``value`` (JSON: dicts, lists, strings) with every string, keys too, encoded."""
    return map_text(value, encode_text)


def decoded(value: V) -> V:
    """``value`` as read from the Store with every string decoded."""
    return map_text(value, decode_text)
