"""Writing artifacts: planning the items, the idempotent put with read-back, and eviction."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from langgraph.store.base import GetOp, Op, PutOp

from ctxgraph.state.tokens import count_text
from ctxgraph.store.artifacts.flows import (
    Flow,
    as_item,
    chunk_problem,
    chunk_text,
    decode_meta,
    list_metas,
)
from ctxgraph.store.artifacts.items import (
    ChunkEntry,
    StoredArtifact,
    chunk_key,
    chunk_value,
    meta_value,
    sha256_hex,
)
from ctxgraph.store.artifacts.layout import CHUNK_BYTES, plan_chunks, row_count
from ctxgraph.store.artifacts.records import (
    Artifact,
    ArtifactKind,
    ArtifactWriteError,
    DamagedArtifactError,
)


@dataclass(frozen=True)
class Draft:
    """What a put was asked to store (the content already checked to be valid Unicode)."""

    ref: str
    kind: ArtifactKind
    content: str
    size_bytes: int
    sha256: str
    source_id: str
    tool_name: str | None


@dataclass(frozen=True)
class Planned:
    """Everything a put writes: the metadata value and the chunk texts."""

    stored: StoredArtifact
    chunks: tuple[str, ...]


def plan_artifact(draft: Draft, *, created_at: str, tokens: int) -> Planned:
    """The record and chunk texts of ``draft``: inline up to ``CHUNK_BYTES``, else chunked."""
    content = draft.content
    table: tuple[ChunkEntry, ...] = ()
    texts: tuple[str, ...] = ()
    if draft.size_bytes > CHUNK_BYTES:
        spans = plan_chunks(content)
        texts = tuple(content[span.start : span.end] for span in spans)
        table = tuple(
            ChunkEntry(span.first, span.rows, span.size, span.continues, sha256_hex(text))
            for span, text in zip(spans, texts, strict=True)
        )
        rows = spans[-1].first + spans[-1].rows
    else:
        rows = row_count(content)
    artifact = Artifact(
        ref=draft.ref,
        kind=draft.kind,
        tool_name=draft.tool_name,
        call_id=draft.source_id,
        created_at=created_at,
        size_bytes=draft.size_bytes,
        tokens=tokens,
        lines=len(content.splitlines()),
        sha256=draft.sha256,
        chunks=len(table) or 1,
    )
    stored = StoredArtifact(
        artifact=artifact,
        rows=rows,
        final_newline=content.endswith("\n"),
        table=table,
        body=None if table else content,
    )
    return Planned(stored, texts)


def write_ops(
    namespace: tuple[str, ...], planned: Planned, previous: StoredArtifact | None
) -> list[Op]:
    """The puts of a new or replaced artifact; chunks first, stale chunks deleted."""
    stored = planned.stored
    ref = stored.artifact.ref
    ops: list[Op] = [
        PutOp(namespace, chunk_key(ref, i), chunk_value(ref, i, text), index=False)
        for i, text in enumerate(planned.chunks)
    ]
    value = meta_value(
        stored.artifact,
        rows=stored.rows,
        final_newline=stored.final_newline,
        table=stored.table,
        body=stored.body,
    )
    ops.append(PutOp(namespace, ref, value, index=False))
    stale = range(len(planned.chunks), len(previous.table) if previous else 0)
    ops.extend(PutOp(namespace, chunk_key(ref, i), None) for i in stale)
    return ops


def verify_stored(
    namespace: tuple[str, ...], stored: StoredArtifact, *, with_meta: bool
) -> Flow[str | None]:
    """Read an artifact back; the first problem found, or None if it resolves intact."""
    ref = stored.artifact.ref
    ops: list[Op] = [GetOp(namespace, ref)] if with_meta else []
    ops += [GetOp(namespace, chunk_key(ref, i)) for i in range(len(stored.table))]
    results = (yield ops) if ops else []
    if with_meta:
        item = as_item(results[0])
        if item is None:
            return "its record is missing"
        try:
            found = decode_meta(ref, item)
        except DamagedArtifactError as error:
            return str(error)
        if found != stored:
            return "its record does not read back as written"
        results = results[1:]
    parts: list[str] = []
    for index, (entry, result) in enumerate(zip(stored.table, results, strict=True)):
        problem = chunk_problem(index, entry, as_item(result))
        if problem is not None:
            return problem
        parts.append(chunk_text(as_item(result)))
    text = stored.body if stored.body is not None else "".join(parts)
    if sha256_hex(text) != stored.artifact.sha256:
        return "its content does not match its SHA-256"
    return None


def put_flow(
    draft: Draft, namespace: tuple[str, ...], *, created_at: str, tokens: int | None
) -> Flow[Artifact]:
    """Store ``draft`` unless it is already there intact; read it back before returning.

    ``tokens`` overrides the count; ``created_at`` dates a new or replaced artifact.
    """
    results = yield [GetOp(namespace, draft.ref)]
    item = as_item(results[0])
    previous: StoredArtifact | None = None
    if item is not None:
        try:
            previous = decode_meta(draft.ref, item)
        except DamagedArtifactError:
            previous = None  # rewritten below
    if previous is not None and previous.artifact.sha256 == draft.sha256:
        problem = yield from verify_stored(namespace, previous, with_meta=False)
        if problem is None:
            return previous.artifact
    counted = tokens if tokens is not None else count_text(draft.content)
    planned = plan_artifact(draft, created_at=created_at, tokens=counted)
    yield write_ops(namespace, planned, previous)
    problem = yield from verify_stored(namespace, planned.stored, with_meta=True)
    if problem is not None:
        raise ArtifactWriteError(f"artifact {draft.ref} did not read back after writing: {problem}")
    return planned.stored.artifact


def evict_flow(
    namespace: tuple[str, ...], quota_bytes: int, keep: Collection[str]
) -> Flow[list[str]]:
    """Delete the oldest artifacts not in ``keep`` until the total size is within the quota."""
    metas = yield from list_metas(namespace)
    total = sum(stored.artifact.size_bytes for stored in metas)
    victims: list[StoredArtifact] = []
    for stored in metas:
        if total <= quota_bytes:
            break
        if stored.artifact.ref in keep:
            continue
        victims.append(stored)
        total -= stored.artifact.size_bytes
    return (yield from _delete(namespace, victims))


def _delete(namespace: tuple[str, ...], victims: Sequence[StoredArtifact]) -> Flow[list[str]]:
    """Delete ``victims`` with their chunks in one batch; returns their refs."""
    ops: list[Op] = []
    for stored in victims:
        ref = stored.artifact.ref
        ops.append(PutOp(namespace, ref, None))
        ops.extend(PutOp(namespace, chunk_key(ref, i), None) for i in range(len(stored.table)))
    if ops:
        yield ops
    return [stored.artifact.ref for stored in victims]


def remove_flow(
    namespace: tuple[str, ...], refs: Collection[str], created_before: str
) -> Flow[list[str]]:
    """Delete the artifacts of ``refs`` stored before ``created_before`` (ISO 8601, UTC).

    The listing is read again here, so an artifact rewritten since its ref was chosen (a
    newer ``created_at``) is left alone.
    """
    cutoff = datetime.fromisoformat(created_before)
    metas = yield from list_metas(namespace)
    victims = [
        stored
        for stored in metas
        if stored.artifact.ref in refs and _created(stored.artifact.created_at) < cutoff
    ]
    return (yield from _delete(namespace, victims))


def _created(created_at: str) -> datetime:
    """An artifact's ``created_at``; an unreadable one counts as new (never removed)."""
    try:
        moment = datetime.fromisoformat(created_at)
    except ValueError:
        return datetime.max.replace(tzinfo=UTC)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
