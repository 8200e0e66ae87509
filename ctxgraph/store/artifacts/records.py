"""The artifact record, its deterministic ref and the errors of the artifact store."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal, get_args

ArtifactKind = Literal["tool_result", "tool_args", "user_input"]
"""What an artifact holds: a tool's result, a tool call's arguments, or a user's input."""

KINDS: frozenset[str] = frozenset(get_args(ArtifactKind))

REF_PATTERN = re.compile(r"art-[0-9a-f]{24}")
"""A ref, matched whole: ``art-`` and 24 lowercase hex digits."""

REF_EXAMPLE = "art-0123456789abcdef01234567"


@dataclass(frozen=True)
class Artifact:
    """The record of one stored artifact (its metadata, never its content)."""

    ref: str
    """``art-`` and 24 hex digits; deterministic, see :func:`ref_for`."""
    kind: ArtifactKind
    tool_name: str | None
    call_id: str | None
    """The tool-call id (``tool_result``/``tool_args``) or message id (``user_input``)."""
    created_at: str
    """ISO 8601, UTC."""
    size_bytes: int
    """UTF-8 bytes of the content."""
    tokens: int
    """cl100k tokens of the content (``ctxgraph.state.tokens.count_text``)."""
    lines: int
    """``len(content.splitlines())``."""
    sha256: str
    """Hex SHA-256 of the UTF-8 content."""
    chunks: int
    """Store items holding the content: 1 when it sits in the metadata item itself."""


class ArtifactError(Exception):
    """Base of the artifact store's errors."""


class ArtifactWriteError(ArtifactError):
    """Storing an artifact failed, or it did not read back intact; names the ref and cause."""


class UnknownArtifactError(ArtifactError, LookupError):
    """No artifact with this ref exists in the thread."""


class DamagedArtifactError(ArtifactError):
    """An artifact's stored items are missing or do not match its record."""


def ref_for(kind: ArtifactKind, source_id: str, part: str = "") -> str:
    r"""The ref of the artifact of ``kind`` made from ``source_id`` (and ``part``).

    ``"art-"`` and the first 24 hex digits of the SHA-256 of ``f"{kind}\0{source_id}\0{part}"``:
    the same source always gets the same ref, so a replayed step finds its artifact again.
    Ids of any length are fine (they are hashed).
    """
    if kind not in KINDS:
        raise ValueError(f"artifact kind must be one of {sorted(KINDS)}, got {kind!r}")
    if not isinstance(source_id, str) or not source_id:
        raise ValueError(f"an artifact needs a non-empty source id, got {source_id!r}")
    if not isinstance(part, str):
        raise ValueError(f"an artifact's part must be a string, got {part!r}")
    digest = hashlib.sha256(f"{kind}\0{source_id}\0{part}".encode()).hexdigest()
    return f"art-{digest[:24]}"


def shown(value: str, limit: int = 80) -> str:
    """``repr(value)``, cut to about ``limit`` characters, for error messages."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def unknown_artifact(ref: str) -> UnknownArtifactError:
    """The error for a ref that names no artifact of this thread."""
    return UnknownArtifactError(
        f"no artifact {shown(ref)} in this thread; a ref is 'art-' and 24 hex digits "
        f"(e.g. {REF_EXAMPLE}), copied exactly from the note that replaced the offloaded "
        "content in this conversation (ArtifactStore.list() lists a thread's refs)"
    )


def checked_ref(ref: object) -> str:
    """``ref`` without surrounding whitespace, or ``UnknownArtifactError`` if malformed."""
    if not isinstance(ref, str):
        raise UnknownArtifactError(
            f"an artifact ref is a string like {REF_EXAMPLE}, got {type(ref).__name__}"
        )
    cleaned = ref.strip()
    if not REF_PATTERN.fullmatch(cleaned):
        raise unknown_artifact(ref)
    return cleaned
