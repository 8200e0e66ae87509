"""The artifact store's operations as Store-agnostic flows, run by a sync or an async driver.

A flow is a generator that yields a batch of Store ops, receives their results and finally
returns its answer; ``run`` drives it with ``store.batch`` and ``arun`` with
``store.abatch``, so the sync and async methods share every decision.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Generator, Iterable, Iterator
from itertools import islice
from typing import TypeVar, cast

from langgraph.store.base import BaseStore, GetOp, Item, Op, Result, SearchItem, SearchOp

from ctxgraph.store.artifacts.items import (
    META_RECORD,
    ChunkEntry,
    StoredArtifact,
    chunk_key,
    decode_body,
    parse_meta,
    sha256_hex,
)
from ctxgraph.store.artifacts.layout import Row, iter_rows, utf8
from ctxgraph.store.artifacts.paging import PageBuilder
from ctxgraph.store.artifacts.records import DamagedArtifactError, unknown_artifact

T = TypeVar("T")
Flow = Generator[list[Op], list[Result], T]
"""Yields Store op batches, is sent their results, returns a ``T``."""

LIST_PAGE = 500
"""Metadata items fetched per Store search while listing."""


def run(store: BaseStore, flow: Flow[T]) -> T:
    """Drive ``flow`` with the sync Store API."""
    try:
        ops = next(flow)
        while True:
            ops = flow.send(store.batch(ops))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def arun(store: BaseStore, flow: Flow[T]) -> T:
    """Drive ``flow`` with the async Store API."""
    try:
        ops = next(flow)
        while True:
            ops = flow.send(await store.abatch(ops))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def as_item(result: Result) -> Item | None:
    """The item a ``GetOp`` found, or None."""
    return result if isinstance(result, Item) else None


def decode_meta(ref: str, item: Item) -> StoredArtifact:
    """The decoded metadata item of ``ref``; ``DamagedArtifactError`` if it does not decode."""
    try:
        stored = parse_meta(item.value)
    except (KeyError, TypeError, ValueError) as error:
        raise DamagedArtifactError(f"artifact {ref} has a damaged record: {error}") from error
    if stored.artifact.ref != ref:
        raise DamagedArtifactError(f"the record under {ref} names {stored.artifact.ref}")
    return stored


def load_meta(namespace: tuple[str, ...], ref: str) -> Flow[StoredArtifact]:
    """The metadata of ``ref``; ``UnknownArtifactError`` if there is none."""
    results = yield [GetOp(namespace, ref)]
    item = as_item(results[0])
    if item is None:
        raise unknown_artifact(ref)
    return decode_meta(ref, item)


def chunk_problem(index: int, entry: ChunkEntry, item: Item | None) -> str | None:
    """Why the stored chunk ``index`` does not match its entry, or None if it does."""
    if item is None:
        return f"chunk {index} is missing"
    try:
        text = decode_body(item.value)
    except ValueError as error:
        return f"chunk {index} does not decode: {error}"
    data = utf8(text)
    if len(data) != entry.size:
        return f"chunk {index} holds {len(data)} bytes, its record says {entry.size}"
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        return f"chunk {index} does not match its SHA-256"
    return None


def chunk_text(item: Item | None) -> str:
    """The text of a chunk item that ``chunk_problem`` accepted."""
    assert item is not None  # checked by chunk_problem
    return decode_body(item.value)


def load_chunks(
    namespace: tuple[str, ...], stored: StoredArtifact, indexes: Iterable[int]
) -> Flow[list[str]]:
    """The texts of chunks ``indexes`` of ``stored``, each checked against its entry."""
    ref, wanted = stored.artifact.ref, list(indexes)
    results = yield [GetOp(namespace, chunk_key(ref, i)) for i in wanted]
    texts: list[str] = []
    for index, result in zip(wanted, results, strict=True):
        item = as_item(result)
        problem = chunk_problem(index, stored.table[index], item)
        if problem is not None:
            raise DamagedArtifactError(f"artifact {ref} is damaged: {problem}")
        texts.append(chunk_text(item))
    return texts


def load_text(namespace: tuple[str, ...], ref: str) -> Flow[tuple[StoredArtifact, str]]:
    """The metadata and the whole content of ``ref``, checked against its SHA-256."""
    stored = yield from load_meta(namespace, ref)
    if stored.body is not None:
        text = stored.body
    else:
        text = "".join((yield from load_chunks(namespace, stored, range(len(stored.table)))))
    if sha256_hex(text) != stored.artifact.sha256:
        raise DamagedArtifactError(f"artifact {ref} is damaged: its content does not match")
    return stored, text


def _feed(builder: PageBuilder, rows: Iterator[Row]) -> None:
    for row in rows:
        if not builder.wants_more or not builder.add(row):
            return


def fill_page(
    namespace: tuple[str, ...], stored: StoredArtifact, builder: PageBuilder
) -> Flow[None]:
    """Feed ``builder`` its rows, loading only the chunks its lines lie in."""
    if stored.body is not None:
        _feed(builder, islice(iter_rows(stored.body), builder.offset, None))
        return
    table = stored.table
    index = bisect_right([entry.first for entry in table], builder.offset) - 1
    while builder.wants_more and index < len(table):
        entry = table[index]
        (text,) = yield from load_chunks(namespace, stored, [index])
        rows = iter_rows(text, continues=entry.continues)
        _feed(builder, islice(rows, builder.next_row - entry.first, None))
        index += 1


def list_metas(namespace: tuple[str, ...]) -> Flow[list[StoredArtifact]]:
    """Every decodable metadata item of the namespace, oldest first."""
    found: list[StoredArtifact] = []
    offset = 0
    while True:
        op = SearchOp(namespace, filter={"record": META_RECORD}, limit=LIST_PAGE, offset=offset)
        (page,) = yield [op]
        items = cast(list[SearchItem], page or [])
        for item in items:
            if item.namespace != namespace:
                continue
            try:
                found.append(parse_meta(item.value, with_body=False))
            except (KeyError, TypeError, ValueError):
                continue  # not an artifact record this version can read; left alone
        if len(items) < LIST_PAGE:
            break
        offset += len(items)
    return sorted(found, key=lambda s: (s.artifact.created_at, s.artifact.ref))
