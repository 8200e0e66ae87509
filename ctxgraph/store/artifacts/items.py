r"""The Store items of an artifact: a metadata item (key ``ref``) and chunk items, and their codec.

Bodies are kept as text, NUL and lone surrogates encoded (``store.text_codec``); a body
of an earlier version holding NUL may be base64 of its UTF-8 bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, cast

from ctxgraph.store.artifacts.layout import utf8
from ctxgraph.store.artifacts.records import KINDS, REF_PATTERN, Artifact, ArtifactKind
from ctxgraph.store.text_codec import decode_text, encode_text

META_RECORD = "artifact"
"""``record`` field of a metadata item (Store searches filter on it)."""

CHUNK_RECORD = "chunk"
"""``record`` field of a chunk item."""

FORMAT = 1
"""Layout version of the items."""


@dataclass(frozen=True)
class ChunkEntry:
    """One chunk as its metadata item lists it."""

    first: int
    """Offset (display line) of the chunk's first line."""
    rows: int
    """Display lines in the chunk."""
    size: int
    """UTF-8 bytes of the chunk."""
    continues: bool
    """True when the chunk starts inside a line."""
    sha256: str


@dataclass(frozen=True)
class StoredArtifact:
    """A decoded metadata item."""

    artifact: Artifact
    rows: int
    """Display lines of the whole content."""
    final_newline: bool
    table: tuple[ChunkEntry, ...]
    """The chunks, when the content is chunked; empty when it sits in ``body``."""
    body: str | None


def chunk_key(ref: str, index: int) -> str:
    """The Store key of chunk ``index`` of ``ref``."""
    return f"{ref}/{index:05d}"


def sha256_hex(text: str) -> str:
    """Hex SHA-256 of the UTF-8 bytes of ``text`` (``layout.utf8``)."""
    return hashlib.sha256(utf8(text)).hexdigest()


def encode_body(text: str) -> dict[str, str]:
    """The ``body``/``encoding`` fields holding ``text`` (any text: ``store.text_codec``)."""
    return {"encoding": "text", "body": encode_text(text)}


def decode_body(value: Mapping[str, Any]) -> str:
    """The text of a ``body``/``encoding`` pair; ``ValueError`` if it is not one."""
    body, encoding = value.get("body"), value.get("encoding")
    if not isinstance(body, str):
        raise ValueError("the item has no text body")
    if encoding == "text":
        return decode_text(body)
    if encoding == "base64":  # how earlier versions kept a body holding NUL
        try:
            return base64.b64decode(body, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as error:
            raise ValueError(f"the base64 body does not decode: {error}") from error
    raise ValueError(f"unknown body encoding {encoding!r}")


def meta_value(
    artifact: Artifact,
    *,
    rows: int,
    final_newline: bool,
    table: tuple[ChunkEntry, ...],
    body: str | None,
) -> dict[str, Any]:
    """The value of the metadata item."""
    value: dict[str, Any] = {
        "record": META_RECORD,
        "format": FORMAT,
        **asdict(artifact),
        "rows": rows,
        "final_newline": final_newline,
        "table": [asdict(entry) for entry in table],
    }
    if body is not None:
        value.update(encode_body(body))
    return value


def chunk_value(ref: str, index: int, text: str) -> dict[str, Any]:
    """The value of one chunk item."""
    return {"record": CHUNK_RECORD, "ref": ref, "index": index, **encode_body(text)}


def _field(value: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    found = value.get(name)
    if not isinstance(found, kind) or (isinstance(found, bool) and kind is int):
        raise ValueError(f"field {name!r} is {found!r}")
    return found


def _optional_text(value: Mapping[str, Any], name: str) -> str | None:
    found = value.get(name)
    if found is not None and not isinstance(found, str):
        raise ValueError(f"field {name!r} is {found!r}")
    return found


def _entry(raw: object) -> ChunkEntry:
    if not isinstance(raw, Mapping):
        raise ValueError(f"chunk entry {raw!r} is not a mapping")
    return ChunkEntry(
        first=_field(raw, "first", int),
        rows=_field(raw, "rows", int),
        size=_field(raw, "size", int),
        continues=_field(raw, "continues", bool),
        sha256=_field(raw, "sha256", str),
    )


def parse_meta(value: Mapping[str, Any], *, with_body: bool = True) -> StoredArtifact:
    """Decode a metadata item; ``ValueError`` naming the first bad field.

    ``with_body=False`` leaves an inline body undecoded (``body`` is None): for listings.
    """
    if value.get("record") != META_RECORD or value.get("format") != FORMAT:
        raise ValueError(f"not an artifact record of format {FORMAT}")
    ref, kind = _field(value, "ref", str), _field(value, "kind", str)
    if not REF_PATTERN.fullmatch(ref) or kind not in KINDS:
        raise ValueError(f"bad ref {ref!r} or kind {kind!r}")
    artifact = Artifact(
        ref=ref,
        kind=cast(ArtifactKind, kind),
        tool_name=_optional_text(value, "tool_name"),
        call_id=_optional_text(value, "call_id"),
        created_at=_field(value, "created_at", str),
        size_bytes=_field(value, "size_bytes", int),
        tokens=_field(value, "tokens", int),
        lines=_field(value, "lines", int),
        sha256=_field(value, "sha256", str),
        chunks=_field(value, "chunks", int),
    )
    table = tuple(_entry(raw) for raw in _field(value, "table", list))
    inline = "body" in value
    if inline == bool(table) or (table and len(table) != artifact.chunks):
        raise ValueError("the record holds neither a body nor a matching chunk table")
    body = decode_body(value) if inline and with_body else None
    return StoredArtifact(
        artifact=artifact,
        rows=_field(value, "rows", int),
        final_newline=_field(value, "final_newline", bool),
        table=table,
        body=body,
    )
