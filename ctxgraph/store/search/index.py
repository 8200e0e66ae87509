"""Per-process BM25 indexes of fact namespaces, derived from the Store and never stale.

The Store is the source of truth. Before every use the cache asks the Store for the
namespace's version: on Postgres a change counter kept by a trigger
(``store.change_tracking``), or an aggregate over the rows where the trigger is not
installed; on other stores a full listing. When the version moved (a write by this or any
other process sharing the database), the trigger's change log (or, without it, a
comparison of every key's update time) names the facts written or deleted since, and only
those are re-read and re-indexed. The log is trusted only while the counter row is the one
the index last saw (same epoch): a namespace whose tracking rows were deleted and then
written again, whatever its counter, is compared key by key, so no deleted fact survives.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import math
import threading
import weakref
from collections.abc import (
    Generator,
    Hashable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeGuard, cast

from langgraph.store.base import BaseStore
from langgraph.store.postgres import AsyncPostgresStore, PostgresStore

from ctxgraph.store.facts import Problem, parse_fact, report_problem
from ctxgraph.store.persistence.change_tracking import (
    CHANGED_ROWS_QUERY,
    VERSION_QUERY,
    row_epoch,
    row_version,
    tracking_probe,
)
from ctxgraph.store.persistence.listing import alist_namespace, list_namespace
from ctxgraph.store.persistence.store_cursor import astore_cursor, store_cursor
from ctxgraph.store.search.bm25 import Bm25Index
from ctxgraph.store.search.scoring import tokenize
from ctxgraph.store.text_codec import decode_text

__all__ = ["FactIndexCache", "Hit", "IndexedDoc", "Lookup", "fact_index_cache"]

Hit = tuple[str, float, Mapping[str, Any]]
"""A search match: key, raw BM25 score (negative, FTS5 sign) and the stored value."""


class Lookup(NamedTuple):
    """What one refreshed read of a namespace answers."""

    hits: list[Hit]
    """The best BM25 matches, best first."""
    leading: list[tuple[str, Mapping[str, Any]]]
    """The most confident corrections, then the most confident facts, without repeats."""
    extra: dict[str, float]
    """Raw BM25 (FTS5 sign; 0.0 when no term matches) of each of the ``extra_keys`` that
    is indexed, from the same refresh as ``hits``."""
    extra_values: dict[str, Mapping[str, Any]]
    """The stored value of each of ``extra``'s keys, as indexed."""


_AGGREGATE = (
    "SELECT count(*) AS n, "
    "coalesce(sum(hashtextextended(key || updated_at::text, 0)), 0)::text AS fingerprint "
    "FROM store WHERE prefix = %s"
)
_STAMPS = "SELECT key, updated_at FROM store WHERE prefix = %s"
_ALL_ROWS = "SELECT key, value, updated_at FROM store WHERE prefix = %s"
_SOME_ROWS = "SELECT key, value, updated_at FROM store WHERE prefix = %s AND key = ANY(%s)"
_MANY = 1_000
"""Above this many changed keys, the whole namespace is read in one query."""


@dataclass(frozen=True)
class IndexedDoc:
    """One stored fact as indexed: its value, its Store update time and its terms."""

    key: str
    value: Mapping[str, Any]
    updated_at: str
    tokens: tuple[str, ...]


@dataclass(frozen=True)
class Changes:
    """What a refresh learned: the new version, rows to (re)index and keys that are gone."""

    version: Hashable
    rows: list[tuple[str, str, Any]]
    """Key, update time and stored value (checked by ``apply``, whatever it is)."""
    removed: list[str]


def _stamp(moment: datetime | str) -> str:
    """An update time as a comparable UTC ISO string."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.isoformat()


def _value(raw: Any) -> Any:
    """A stored value as decoded JSON; ``apply`` checks that it is a fact."""
    if isinstance(raw, str):
        return json.loads(raw)
    if isinstance(raw, bytes | bytearray | memoryview):
        return json.loads(bytes(raw))
    return raw  # already decoded (a mapping, or any other JSON value)


def _problem(namespace: tuple[str, ...], key: str, value: Any) -> str | None:
    """What is wrong with a stored fact value (None when it is a fact), reported once.

    Every value the index takes in passes ``store.facts.parse_fact``, so what the
    index holds (and so every search, listing and memory view) is a well-formed fact.
    """
    parsed = parse_fact(namespace, key, value)
    if isinstance(parsed, Problem):
        report_problem(parsed)
        return parsed.problem
    return None


def _is_correction(value: Mapping[str, Any]) -> bool:
    return value.get("category") == "correction" or bool(value.get("is_correction"))


_REBUILD_ORDER = 256
"""Above this many changed keys, the confidence orders are re-sorted instead of updated."""

Rank = tuple[float, float, str]
"""Sort key of a fact: negated confidence, negated creation time, key."""


def _rank(key: str, value: Mapping[str, Any]) -> Rank:
    """Most confident first, then newest first; facts without a creation time last."""
    created = value.get("created_at")
    try:
        moment = datetime.fromisoformat(str(created)).timestamp() if created else -math.inf
    except ValueError:
        moment = -math.inf
    return (-float(value.get("confidence", 0.0)), -moment, key)


class _Order:
    """Keys kept sorted by their rank, updated in place as facts change."""

    def __init__(self) -> None:
        self._items: list[Rank] = []
        self._ranks: dict[str, Rank] = {}

    def rebuild(self, ranks: Mapping[str, Rank]) -> None:
        """Replace the order with ``ranks``, sorted once."""
        self._ranks = dict(ranks)
        self._items = sorted(self._ranks.values())

    def put(self, key: str, rank: Rank) -> None:
        """Insert ``key`` (or move it) at ``rank``."""
        self.discard(key)
        bisect.insort(self._items, rank)
        self._ranks[key] = rank

    def discard(self, key: str) -> None:
        """Remove ``key`` if it is there."""
        rank = self._ranks.pop(key, None)
        if rank is not None:
            del self._items[bisect.bisect_left(self._items, rank)]

    def first(self, count: int) -> list[str]:
        """The first ``count`` keys."""
        return [rank[2] for rank in self._items[:count]]


@dataclass
class _Namespace:
    """The index of one namespace; every access holds ``lock``."""

    version: Hashable = None
    docs: dict[str, IndexedDoc] = field(default_factory=dict)
    namespace: tuple[str, ...] = ()
    """The Store namespace indexed (names it in the report of a malformed value)."""
    problems: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Keys whose stored value is not a fact: their update time and what is wrong."""
    index: Bm25Index = field(default_factory=Bm25Index)
    lock: threading.Lock = field(default_factory=threading.Lock)
    loaded: bool = False
    ranked: _Order = field(default_factory=lambda: _Order())
    """Every key, most confident first (newest first on ties)."""
    corrections: _Order = field(default_factory=lambda: _Order())
    """The keys of corrections, in the same order."""
    alocks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = field(
        default_factory=weakref.WeakKeyDictionary
    )

    def stale(self, stamps: Mapping[str, str]) -> tuple[list[str], list[str]]:
        """Keys whose update time differs from the index, and indexed keys that are gone."""
        changed = [k for k, s in stamps.items() if self._stamp_of(k) != s]
        return changed, [k for k in (*self.docs, *self.problems) if k not in stamps]

    def _stamp_of(self, key: str) -> str | None:
        """The update time the index last read ``key`` at, well-formed or not."""
        doc = self.docs.get(key)
        if doc is not None:
            return doc.updated_at
        bad = self.problems.get(key)
        return None if bad is None else bad[0]

    def apply(self, changes: Changes) -> None:
        """Re-index rows whose update time differs from the index's and drop removed keys."""
        added: dict[str, tuple[str, ...]] = {}
        malformed: list[str] = []
        for key, stamp, value in changes.rows:
            if self._stamp_of(key) == stamp:
                continue
            problem = _problem(self.namespace, key, value)
            if problem is not None:
                self.problems[key] = (stamp, problem)
                malformed.append(key)
                added.pop(key, None)
                continue
            self.problems.pop(key, None)
            tokens = tuple(tokenize(decode_text(str(value.get("content", "")))))
            self.docs[key] = IndexedDoc(key, value, stamp, tokens)
            added[key] = tokens
        for key in changes.removed:
            self.problems.pop(key, None)
        removed = [
            key
            for key in dict.fromkeys([*changes.removed, *malformed])
            if self.docs.pop(key, None) is not None
        ]
        self.index.update(added, removed)
        self._reorder(added, removed)
        self.version = changes.version
        self.loaded = True

    def _reorder(self, added: Mapping[str, object], removed: Sequence[str]) -> None:
        """Keep the confidence orders current: in place for a few changes, else re-sorted."""
        if len(added) + len(removed) > _REBUILD_ORDER:
            ranks = {key: _rank(key, doc.value) for key, doc in self.docs.items()}
            self.ranked.rebuild(ranks)
            self.corrections.rebuild(
                {k: r for k, r in ranks.items() if _is_correction(self.docs[k].value)}
            )
            return
        for key in removed:
            self.ranked.discard(key)
            self.corrections.discard(key)
        for key in added:
            value = self.docs[key].value
            rank = _rank(key, value)
            self.ranked.put(key, rank)
            if _is_correction(value):
                self.corrections.put(key, rank)
            else:
                self.corrections.discard(key)


class FactIndexCache:
    """Indexes per (store, namespace), refreshed whenever the Store's version moves."""

    def __init__(self) -> None:
        self._spaces: weakref.WeakKeyDictionary[BaseStore, dict[tuple[str, ...], _Namespace]]
        self._tracked: weakref.WeakKeyDictionary[BaseStore, bool]
        self._guard = threading.Lock()
        self.clear()

    def clear(self) -> None:
        """Drop every index; the next use rebuilds from the Store."""
        with self._guard:
            self._spaces = weakref.WeakKeyDictionary()
            self._tracked = weakref.WeakKeyDictionary()

    def _space(self, store: BaseStore, namespace: tuple[str, ...]) -> _Namespace:
        with self._guard:
            spaces = self._spaces.setdefault(store, {})
            if namespace not in spaces:
                spaces[namespace] = _Namespace(namespace=namespace)
            return spaces[namespace]

    # -- reading the Store --------------------------------------------------------------

    def _changes(
        self, store: BaseStore, namespace: tuple[str, ...], space: _Namespace
    ) -> Changes | None:
        if not isinstance(store, PostgresStore):
            return _listing_changes(space, list_namespace(store, namespace))
        with store_cursor(store) as cursor:
            if store not in self._tracked:
                cursor.execute(tracking_probe)
                self._tracked[store] = _ready(cursor.fetchone())
            plan = _refresh_plan(space, ".".join(namespace), self._tracked[store])
            try:
                query = next(plan)
                while True:
                    cursor.execute(*query)
                    query = plan.send(cursor.fetchall())
            except StopIteration as done:
                return cast(Changes | None, done.value)

    async def _achanges(
        self, store: BaseStore, namespace: tuple[str, ...], space: _Namespace
    ) -> Changes | None:
        if not isinstance(store, AsyncPostgresStore):
            items = await alist_namespace(store, namespace)
            with space.lock:
                return _listing_changes(space, items)
        async with astore_cursor(store) as cursor:
            if store not in self._tracked:
                await cursor.execute(tracking_probe)
                self._tracked[store] = _ready(await cursor.fetchone())
            plan = _refresh_plan(space, ".".join(namespace), self._tracked[store])
            # The plan reads the index between queries; a sync caller in another thread
            # may be updating it, so each step holds its lock (never across an await).
            try:
                with space.lock:
                    query = next(plan)
                while True:
                    await cursor.execute(*query)
                    rows = await cursor.fetchall()
                    with space.lock:
                        query = plan.send(rows)
            except StopIteration as done:
                return cast(Changes | None, done.value)

    def _fresh(self, store: BaseStore, namespace: tuple[str, ...]) -> _Namespace:
        """The namespace's index, refreshed; the caller must then hold its lock to read it."""
        space = self._space(store, namespace)
        with space.lock:
            changes = self._changes(store, namespace, space)
            if changes is not None:
                space.apply(changes)
        return space

    async def _afresh(self, store: BaseStore, namespace: tuple[str, ...]) -> _Namespace:
        space = self._space(store, namespace)
        loop = asyncio.get_running_loop()
        async with space.alocks.setdefault(loop, asyncio.Lock()):
            changes = await self._achanges(store, namespace, space)
            if changes is not None:
                with space.lock:
                    space.apply(changes)
        return space

    # -- answers ------------------------------------------------------------------------

    def lookup(
        self,
        store: BaseStore,
        namespace: tuple[str, ...],
        terms: Sequence[str],
        limit: int,
        *,
        leading: int = 0,
        extra_keys: Iterable[str] = (),
    ) -> Lookup:
        """Refresh once, then answer for ``terms`` and the leading facts.

        The best ``limit`` BM25 matches (plus any tied with the last one), with
        ``leading`` that many of the most confident corrections and facts, and the exact
        BM25 of each of ``extra_keys`` (candidates found another way, e.g. by vector
        search), computed from those documents alone.
        """
        return _lookup(self._fresh(store, namespace), terms, limit, leading, extra_keys)

    async def alookup(
        self,
        store: BaseStore,
        namespace: tuple[str, ...],
        terms: Sequence[str],
        limit: int,
        *,
        leading: int = 0,
        extra_keys: Iterable[str] = (),
    ) -> Lookup:
        """Async :meth:`lookup`."""
        space = await self._afresh(store, namespace)
        return _lookup(space, terms, limit, leading, extra_keys)

    def values(
        self, store: BaseStore, namespace: tuple[str, ...]
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """Every fact of the namespace as ``(key, value)``."""
        space = self._fresh(store, namespace)
        with space.lock:
            return [(key, doc.value) for key, doc in space.docs.items()]

    async def avalues(
        self, store: BaseStore, namespace: tuple[str, ...]
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """Async :meth:`values`."""
        space = await self._afresh(store, namespace)
        with space.lock:
            return [(key, doc.value) for key, doc in space.docs.items()]

    def problems(self, store: BaseStore, namespace: tuple[str, ...]) -> list[tuple[str, str]]:
        """Every key of the namespace whose value is not a fact, with what is wrong, by key.

        These values are left out of every answer of the index (each reported once).
        """
        space = self._fresh(store, namespace)
        with space.lock:
            return sorted((key, problem) for key, (_, problem) in space.problems.items())

    async def aproblems(
        self, store: BaseStore, namespace: tuple[str, ...]
    ) -> list[tuple[str, str]]:
        """Async :meth:`problems`."""
        space = await self._afresh(store, namespace)
        with space.lock:
            return sorted((key, problem) for key, (_, problem) in space.problems.items())


def _lookup(
    space: _Namespace,
    terms: Sequence[str],
    limit: int,
    leading: int,
    extra_keys: Iterable[str] = (),
) -> Lookup:
    with space.lock:
        hits = space.index.search(terms, limit, ties=True) if terms else []
        first = [*space.corrections.first(leading), *space.ranked.first(leading)]
        extra = space.index.scores_for(terms, extra_keys)
        return Lookup(
            [(key, raw, space.docs[key].value) for key, raw in hits],
            [(key, space.docs[key].value) for key in dict.fromkeys(first)],
            {key: -score if score else 0.0 for key, score in extra.items()},
            {key: space.docs[key].value for key in extra},
        )


Query = tuple[str, tuple[Any, ...]]


def _refresh_plan(
    space: _Namespace, prefix: str, tracked: bool
) -> Generator[Query, list[Any], Changes | None]:
    """The queries that bring ``space`` up to date, as a generator fed each query's rows.

    Sync and async callers run the same plan. With change tracking the log names the keys
    written since the index's counter and they are read in the same query (two round
    trips in all after a write, one when nothing changed); without it, or when the counter
    row is not the one the index last saw (see ``_since``), every key's update time is
    compared.
    """
    rows = yield (VERSION_QUERY if tracked else _AGGREGATE, (prefix,))
    version = _version(rows[0] if rows else None, tracked)
    if space.loaded and version == space.version:
        return None
    since = _since(space.version, version) if tracked and space.loaded else None
    if since is not None:
        logged = yield (CHANGED_ROWS_QUERY, (prefix, since))
        # The counter moved, so the log names at least one key, unless the namespace's
        # tracking rows were deleted meanwhile: then only a full comparison is sound.
        if logged:
            stored = [row for row in logged if row["value"] is not None]
            gone = [row["key"] for row in logged if row["value"] is None]
            return Changes(version, _rows(stored), gone)
    stamps = {row["key"]: _stamp(row["updated_at"]) for row in (yield (_STAMPS, (prefix,)))}
    changed, removed = space.stale(stamps)
    if not changed:
        return Changes(version, [], removed)
    every = len(changed) > _MANY
    query: Query = (_ALL_ROWS, (prefix,)) if every else (_SOME_ROWS, (prefix, changed))
    return Changes(version, _rows((yield query)), removed)


def _since(seen: Hashable, current: Hashable) -> int | None:
    """The counter to read the change log from, or None when the log cannot be trusted.

    The log since the counter the index saw names every change only while the counter
    row is the same one: same epoch (a row created anew, after its tracking rows were
    deleted, has another) and a counter that did not go back. A namespace without a row
    (counter 0, no epoch) has nothing in the log to read.
    """
    if _is_counter(seen) and _is_counter(current):
        _, seen_counter, seen_epoch = seen
        _, counter, epoch = current
        if epoch is not None and epoch == seen_epoch and counter >= seen_counter:
            return int(seen_counter)
    return None


def _is_counter(version: Hashable) -> TypeGuard[tuple[Any, ...]]:
    return isinstance(version, tuple) and len(version) == 3 and version[0] == "counter"


def _ready(row: Any) -> bool:
    if row is None:
        return False
    return bool(row["ready"] if isinstance(row, Mapping) else row[0])


def _version(row: Any, tracked: bool) -> Hashable:
    if tracked:
        return ("counter", row_version(row), row_epoch(row))
    return ("aggregate", int(row["n"]), str(row["fingerprint"])) if row else ("aggregate", 0, "0")


def _rows(rows: list[Any]) -> list[tuple[str, str, Any]]:
    return [(row["key"], _stamp(row["updated_at"]), _value(row["value"])) for row in rows]


def _listing_changes(space: _Namespace, items: list[Any]) -> Changes | None:
    stamps = {item.key: _stamp(item.updated_at) for item in items}
    # Compared as a set: a listing is already a pass over every fact; no sort on top.
    version = frozenset(stamps.items())
    if space.loaded and version == space.version:
        return None
    changed, removed = space.stale(stamps)
    wanted = set(changed)
    rows = [(i.key, stamps[i.key], i.value) for i in items if i.key in wanted]
    return Changes(version, rows, removed)


fact_index_cache = FactIndexCache()
"""The process-wide cache used by ``MemoryRepository``."""
