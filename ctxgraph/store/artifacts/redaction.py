"""Redacting a stored artifact: its whole text is rewritten, chunks and hashes with it.

The content is read whole (a forgotten text may straddle two chunks), replaced, and
written back under the same ref with the same creation time, so paging, the quota and
orphan removal see the same artifact. Offload stubs in messages and the archive keep the
SHA-256 of the content they were made from; the metadata item lists the hashes the
artifact had before each redaction (``redacted_from``), so a reader can tell a redacted
artifact from a damaged one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.store.base import BaseStore, GetOp, PutOp

from ctxgraph.store.artifacts.flows import Flow, arun, as_item, list_metas, load_text, run
from ctxgraph.store.artifacts.items import sha256_hex
from ctxgraph.store.artifacts.layout import utf8_size
from ctxgraph.store.artifacts.writes import Draft, put_flow
from ctxgraph.store.namespaces import thread_artifacts

__all__ = [
    "REDACTED_FROM",
    "Replace",
    "aredact_artifacts",
    "prior_hashes",
    "redact_artifacts",
    "redacted_from",
]

REDACTED_FROM = "redacted_from"
"""Metadata field: the SHA-256 hashes an artifact's content had before its redactions."""

Replace = Callable[[str], tuple[str, int]]
"""Text in, redacted text and the number of replacements out."""


def redacted_from(value: Any) -> list[str]:
    """The hashes a metadata item's content had before its redactions (oldest first)."""
    found = value.get(REDACTED_FROM) if isinstance(value, dict) else None
    return [sha for sha in found if isinstance(sha, str)] if isinstance(found, list) else []


def _redact_flow(thread_id: str, replace: Replace, dry_run: bool) -> Flow[dict[str, int]]:
    namespace = thread_artifacts(thread_id)
    counts: dict[str, int] = {}
    for listed in (yield from list_metas(namespace)):
        artifact = listed.artifact
        stored, text = yield from load_text(namespace, artifact.ref)
        redacted, found = replace(text)
        if not found:
            continue
        counts[artifact.ref] = found
        if dry_run:
            continue
        draft = Draft(
            ref=artifact.ref,
            kind=artifact.kind,
            content=redacted,
            size_bytes=utf8_size(redacted),
            sha256=sha256_hex(redacted),
            source_id=artifact.call_id or artifact.ref,
            tool_name=artifact.tool_name,
        )
        yield from put_flow(draft, namespace, created_at=artifact.created_at, tokens=None)
        (item,) = yield [GetOp(namespace, artifact.ref)]
        meta = as_item(item)
        if meta is not None:
            value = dict(meta.value)
            value[REDACTED_FROM] = [*redacted_from(meta.value), stored.artifact.sha256]
            yield [PutOp(namespace, artifact.ref, value, index=False)]
    return counts


def redact_artifacts(
    store: BaseStore, thread_id: str, replace: Replace, *, dry_run: bool = False
) -> dict[str, int]:
    """Redact every artifact of the thread holding the text; returns ref -> replacements.

    A damaged artifact (content not matching its hash) raises ``DamagedArtifactError``
    before anything of it is written.
    """
    return run(store, _redact_flow(thread_id, replace, dry_run))


async def aredact_artifacts(
    store: BaseStore, thread_id: str, replace: Replace, *, dry_run: bool = False
) -> dict[str, int]:
    """Async :func:`redact_artifacts`."""
    return await arun(store, _redact_flow(thread_id, replace, dry_run))


def prior_hashes(store: BaseStore, thread_id: str, ref: str) -> list[str]:
    """The SHA-256 hashes ``ref``'s content had before it was redacted (none: never was)."""
    item = store.get(thread_artifacts(thread_id), ref)
    return redacted_from(item.value) if item is not None else []
