"""Retrieval evaluation on MADial-Bench (zh) through ``MemoryRepository.add_fact``/``search``.

Each user's memories (their ``event`` text) are stored as that user's facts; the dialogue
lines before the first test turn are the query; the gold answers are ``relevant-id``.
recall@k = |top-k ∩ gold| / |gold|, MRR@10 = 1 / rank of the first gold memory in the top
ten (0 if none), both averaged over dialogues. The published dense-retriever top-20 lists
in ``published_top20/`` are scored with the same functions, side by side.

Facts are stored with the run's time as their creation time (when the agent learned them);
the event dates are part of what happened, not of when it was remembered. The row
``decay from event dates`` stores each memory with its event date as ``created_at`` to show
what the time decay does to this data.

``--embeddings`` adds a table for the configured embedding endpoint (``OPENAI_BASE_URL``,
``CTXGRAPH_EMBEDDING_MODEL``, ``CTXGRAPH_EMBEDDING_DIMS`` and the optional
``CTXGRAPH_EMBEDDING_QUERY_PREFIX`` / ``CTXGRAPH_EMBEDDING_DOCUMENT_PREFIX``; see
``ctxgraph.store.persistence.vector_index``): lexical, hybrid (BM25 fused with the Store's
vectors) and dense-only (plain cosine of the same vectors, no ctxgraph ranking) side by
side, facts stored now and dated by their events, with recall@5, MRR@10, the median
search time and the embedding calls per search. Hybrid meets its targets when it is at
least as good as both other modes on both metrics.

The data is not part of this repository. ``--data`` names either a folder holding
``MADial-Bench-zh-memory.json``, ``MADial-Bench-zh-dialogue.json`` and ``published_top20/``,
or a checkout of the MADial-Bench repository (``data/ch`` and ``embeddings/ch``); see
docs/benchmarks.md. Without the data the run stops with one line naming the missing path
and exit status 2.

Run ``python -m bench.retrieval_eval [--data ../shared/data/madial_zh] [--embeddings]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langgraph.store.memory import InMemoryStore

from ctxgraph.state.context import Context
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.persistence.vector_index import EmbeddingConfigError, embedding_index
from ctxgraph.store.search.bm25 import Bm25Index

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "madial_zh"
MEMORY_FILE = "MADial-Bench-zh-memory.json"
DIALOGUE_FILE = "MADial-Bench-zh-dialogue.json"
TARGET_RECALL_AT_5 = 0.75
TARGET_MRR_AT_10 = 0.85
AGED_RECALL_AT_5 = 0.48
"""recall@5 the rerank must keep with facts stored now and with facts dated by events."""
AGED_MRR_AT_10 = 0.56
"""MRR@10 the rerank must keep with facts stored now and with facts dated by events."""
PUBLISHED = {
    "OpenAI embeddings": "openai_zh_top_20_ids.json",
    "Stella": "Stella_zh_top_20_ids.json",
    "Dmeta": "Dmeta_zh_top_20_ids.json",
    "Acge": "Acge_zh_top_20_ids.json",
    "BGE-M3 dense": "BGE_M3_dense_zh_top_20_ids.json",
    "BGE-M3 ColBERT": "BGE_M3_colbert_zh_top_20_ids.json",
}


@dataclass(frozen=True)
class DataFiles:
    """Where the memories, the dialogues and the published top-20 lists are."""

    memories: Path
    dialogues: Path
    published: Path

    @classmethod
    def locate(cls, data: Path) -> DataFiles:
        """The files under ``data``: a flat data folder or a MADial-Bench checkout."""
        checkout = data / "data" / "ch"
        if checkout.is_dir():
            return cls(checkout / MEMORY_FILE, checkout / DIALOGUE_FILE, data / "embeddings" / "ch")
        return cls(data / MEMORY_FILE, data / DIALOGUE_FILE, data / "published_top20")

    def first_missing(self) -> Path | None:
        """The first file the evaluation needs that is not there, or None."""
        needed = [self.memories, self.dialogues]
        needed += [self.published / filename for filename in PUBLISHED.values()]
        return next((path for path in needed if not path.is_file()), None)


@dataclass(frozen=True)
class Dialogue:
    """One test dialogue: whose it is, the query text and the gold memory ids."""

    id: int
    user: int
    query: str
    gold: frozenset[int]


@dataclass(frozen=True)
class Scores:
    """Averaged metrics of one retriever."""

    recall_at_5: float
    recall_at_10: float
    mrr_at_10: float


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def load_memories(data: Path) -> dict[int, dict[str, Any]]:
    """Memory id -> record (``event``, ``time``, ``user-id``...)."""
    memories: dict[int, dict[str, Any]] = {}
    for row in _json_lines(DataFiles.locate(data).memories):
        for key, record in row.items():
            memories[int(key)] = record
    return memories


def load_dialogues(data: Path) -> list[Dialogue]:
    """The dialogues, each with the lines before its first test turn as the query."""
    dialogues = []
    for row in _json_lines(DataFiles.locate(data).dialogues):
        turn = min(row["test-turn"])
        query = "".join(row["dialogue"][:turn])
        gold = frozenset(int(i) for i in row["relevant-id"])
        dialogues.append(Dialogue(int(row["id"]), int(row["user-id"]), query, gold))
    return dialogues


def score(rankings: dict[int, Sequence[int]], dialogues: Sequence[Dialogue]) -> Scores:
    """recall@5, recall@10 and MRR@10 of ``rankings`` (dialogue id -> ranked memory ids)."""
    r5 = r10 = mrr = 0.0
    for dialogue in dialogues:
        ranked = list(rankings.get(dialogue.id, ()))
        r5 += len(set(ranked[:5]) & dialogue.gold) / len(dialogue.gold)
        r10 += len(set(ranked[:10]) & dialogue.gold) / len(dialogue.gold)
        mrr += next((1 / (i + 1) for i, m in enumerate(ranked[:10]) if m in dialogue.gold), 0.0)
    n = len(dialogues)
    return Scores(r5 / n, r10 / n, mrr / n)


def published_rankings(data: Path, filename: str) -> dict[int, list[int]]:
    """Dialogue id -> the published top-20 memory ids."""
    return {
        int(row["id"]): [int(i) for i in row["top_20_ids"]]
        for row in _json_lines(DataFiles.locate(data).published / filename)
    }


class CountingEmbeddings(Embeddings):
    """An embedder that counts the calls made through it (a call embeds one batch)."""

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The inner embedder's, counted."""
        self.calls += 1
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """The inner embedder's, counted."""
        self.calls += 1
        return self.inner.embed_query(text)


@dataclass(frozen=True)
class Run:
    """One ranking run: the rankings, the median search time and embedding calls per search."""

    rankings: dict[int, list[int]]
    median_ms: float
    calls_per_search: float = 0.0


def _median(timings: list[float]) -> float:
    timings = sorted(timings)
    return timings[len(timings) // 2] if timings else 0.0


def _created(record: dict[str, Any], event_dates: bool, now: datetime) -> datetime:
    return datetime.fromisoformat(record["time"]).replace(tzinfo=UTC) if event_dates else now


def ctxgraph_run(
    memories: dict[int, dict[str, Any]],
    dialogues: Sequence[Dialogue],
    *,
    event_dates: bool,
    index: Any = None,
) -> Run:
    """Store every memory with ``add_fact`` and rank them with ``search``.

    ``index`` (a Store index config) turns on hybrid search with that embedding model;
    its embedder's calls during the searches are counted.
    """
    counter = None
    if index is not None:
        counter = CountingEmbeddings(index["embed"])
        index = {**index, "embed": counter}
    repository = MemoryRepository(InMemoryStore(index=index))
    now = datetime.now(UTC)
    for memory_id, record in memories.items():
        repository.add_fact(
            _context(int(record["user-id"])),
            record["event"],
            key=f"memory_{memory_id}",
            created_at=_created(record, event_dates, now),
        )
    latest = max(datetime.fromisoformat(r["time"]) for r in memories.values())
    search_now = latest.replace(tzinfo=UTC) + timedelta(days=1) if event_dates else None
    rankings: dict[int, list[int]] = {}
    timings: list[float] = []
    before = counter.calls if counter is not None else 0
    for dialogue in dialogues:
        started = time.perf_counter()
        found = repository.search(_context(dialogue.user), dialogue.query, top_k=10, now=search_now)
        timings.append((time.perf_counter() - started) * 1000)
        rankings[dialogue.id] = [int(fact.id.removeprefix("memory_")) for fact in found]
    calls = (counter.calls - before) if counter is not None else 0
    return Run(rankings, _median(timings), calls / max(1, len(dialogues)))


def ctxgraph_rankings(
    memories: dict[int, dict[str, Any]],
    dialogues: Sequence[Dialogue],
    *,
    event_dates: bool,
    index: Any = None,
) -> tuple[dict[int, list[int]], float]:
    """:func:`ctxgraph_run`'s rankings and median milliseconds."""
    run = ctxgraph_run(memories, dialogues, event_dates=event_dates, index=index)
    return run.rankings, run.median_ms


def dense_run(
    memories: dict[int, dict[str, Any]], dialogues: Sequence[Dialogue], embeddings: Embeddings
) -> Run:
    """Plain cosine of the query's and each memory's vector, per user, top ten.

    Documents are embedded with ``embed_documents`` and queries with ``embed_query``, as the
    Store and a memory search embed them; a search is the query's embedding and the cosine
    over the user's memories. Facts' dates play no part.
    """
    import numpy as np

    ids = list(memories)
    vectors = np.asarray(embeddings.embed_documents([memories[i]["event"] for i in ids]))
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    users = np.asarray([int(memories[i]["user-id"]) for i in ids])
    rankings: dict[int, list[int]] = {}
    timings: list[float] = []
    for dialogue in dialogues:
        started = time.perf_counter()
        query = np.asarray(embeddings.embed_query(dialogue.query))
        mine = np.flatnonzero(users == dialogue.user)
        cosine = vectors[mine] @ (query / max(float(np.linalg.norm(query)), 1e-12))
        order = mine[np.argsort(-cosine, kind="stable")][:10]
        timings.append((time.perf_counter() - started) * 1000)
        rankings[dialogue.id] = [ids[i] for i in order]
    return Run(rankings, _median(timings), 1.0)


@dataclass(frozen=True)
class ModeRow:
    """One line of the embeddings table."""

    mode: str
    dated: bool
    scores: Scores
    run: Run


def embedding_rows(
    memories: dict[int, dict[str, Any]], dialogues: Sequence[Dialogue], index: Any
) -> list[ModeRow]:
    """Lexical, hybrid and dense-only, undated and dated, for the Store ``index`` config."""
    rows: list[ModeRow] = []
    for mode in ("lexical", "hybrid"):
        for dated in (False, True):
            run = ctxgraph_run(
                memories,
                dialogues,
                event_dates=dated,
                index=index if mode == "hybrid" else None,
            )
            rows.append(ModeRow(mode, dated, score(run.rankings, dialogues), run))
    dense = dense_run(memories, dialogues, index["embed"])
    for dated in (False, True):
        rows.append(ModeRow("dense-only", dated, score(dense.rankings, dialogues), dense))
    return rows


def embedding_table(rows: Sequence[ModeRow]) -> tuple[bool, list[str]]:
    """The table's lines and whether hybrid is at least lexical and dense-only on both metrics."""
    lines = [
        f"{'mode':<11} {'facts':<8} {'r@5':>6} {'MRR@10':>7} {'p50 ms':>8} "
        f"{'embedding calls/search':>23}"
    ]
    for row in rows:
        lines.append(
            f"{row.mode:<11} {'dated' if row.dated else 'undated':<8} "
            f"{row.scores.recall_at_5:>6.3f} {row.scores.mrr_at_10:>7.3f} "
            f"{row.run.median_ms:>8.2f} {row.run.calls_per_search:>23.2f}"
        )
    by = {(row.mode, row.dated): row.scores for row in rows}
    passed = all(
        getattr(by[("hybrid", dated)], metric) >= getattr(by[(other, dated)], metric)
        for dated in (False, True)
        for other in ("lexical", "dense-only")
        for metric in ("recall_at_5", "mrr_at_10")
    )
    verdict = "PASS" if passed else "MISS"
    lines.append(f"hybrid at least lexical and dense-only on r@5 and MRR@10: {verdict}")
    return passed, lines


def plain_bm25_rankings(
    memories: dict[int, dict[str, Any]], dialogues: Sequence[Dialogue], *, mode: str
) -> dict[int, list[int]]:
    """Plain BM25 per user over jieba's ``lcut`` or ``cut_for_search`` words, top ten.

    No stop words, normalization or rerank: the baseline the ranking is compared with.
    """
    import jieba

    jieba.setLogLevel(60)
    cut = jieba.lcut if mode == "lcut" else jieba.lcut_for_search

    def terms(text: str) -> list[str]:
        return [word for word in cut(text) if word.strip()]

    per_user: dict[int, Bm25Index] = {}
    for memory_id, record in memories.items():
        index = per_user.setdefault(int(record["user-id"]), Bm25Index())
        index.add(str(memory_id), terms(record["event"]))
    rankings: dict[int, list[int]] = {}
    for dialogue in dialogues:
        index = per_user.get(dialogue.user, Bm25Index())
        rankings[dialogue.id] = [int(key) for key, _ in index.search(terms(dialogue.query), 10)]
    return rankings


def ranking_verdict(now: Scores, dated: Scores) -> tuple[bool, str]:
    """Whether the rerank keeps its quality once facts carry their event dates, and why."""
    passed = all(
        result.recall_at_5 >= AGED_RECALL_AT_5 and result.mrr_at_10 >= AGED_MRR_AT_10
        for result in (now, dated)
    )
    line = (
        f"aging targets recall@5 >= {AGED_RECALL_AT_5} and MRR@10 >= {AGED_MRR_AT_10}, "
        f"stored now and dated by events: {'PASS' if passed else 'MISS'} (now "
        f"{now.recall_at_5:.3f} / {now.mrr_at_10:.3f}, dated {dated.recall_at_5:.3f} / "
        f"{dated.mrr_at_10:.3f})"
    )
    return passed, line


def _context(user: int) -> Context:
    return Context(user_id=f"madial-{user}")


def missing_data_message(data: Path) -> str | None:
    """One line naming what is missing under ``data``, or None when every file is there."""
    if not data.is_dir():
        missing = data
    else:
        found = DataFiles.locate(data).first_missing()
        if found is None:
            return None
        missing = found
    return (
        f"retrieval_eval: MADial-Bench zh data not found: {missing}; "
        "pass --data PATH (a folder of the MADial-Bench zh files or a MADial-Bench checkout, "
        "see docs/benchmarks.md)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the evaluation table; exit 1 when a target is missed, 2 when data is missing."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="MADial-Bench zh data folder or MADial-Bench checkout (default: %(default)s)",
    )
    parser.add_argument(
        "--embeddings",
        action="store_true",
        help="also compare lexical, hybrid and dense-only search with the configured "
        "embedding endpoint (CTXGRAPH_EMBEDDING_MODEL, OPENAI_BASE_URL, CTXGRAPH_EMBEDDING_DIMS)",
    )
    args = parser.parse_args(argv)
    index = None
    if args.embeddings:
        try:
            index = embedding_index(os.environ)
        except EmbeddingConfigError as error:
            print(f"retrieval_eval: {error}", file=sys.stderr)
            return 2
        if index is None:
            print(
                "retrieval_eval: --embeddings needs CTXGRAPH_EMBEDDING_MODEL (and "
                "OPENAI_BASE_URL, CTXGRAPH_EMBEDDING_DIMS) naming the embedding endpoint",
                file=sys.stderr,
            )
            return 2
    problem = missing_data_message(args.data)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    memories = load_memories(args.data)
    dialogues = load_dialogues(args.data)

    ours, median_ms = ctxgraph_rankings(memories, dialogues, event_dates=False)
    decayed, _ = ctxgraph_rankings(memories, dialogues, event_dates=True)
    rows = [("ctxgraph BM25 (jieba) + rerank", score(ours, dialogues))]
    rows.append(("ctxgraph, decay from event dates", score(decayed, dialogues)))
    for mode in ("lcut", "cut_for_search"):
        plain = plain_bm25_rankings(memories, dialogues, mode=mode)
        rows.append((f"plain BM25, jieba {mode}", score(plain, dialogues)))
    rows += [
        (f"published: {name}", score(published_rankings(args.data, filename), dialogues))
        for name, filename in PUBLISHED.items()
    ]
    print(f"MADial-Bench zh: {len(memories)} memories, {len(dialogues)} dialogues")
    print(f"{'retriever':<36} {'recall@5':>9} {'recall@10':>10} {'MRR@10':>7}")
    for name, result in rows:
        print(
            f"{name:<36} {result.recall_at_5:>9.3f} {result.recall_at_10:>10.3f} "
            f"{result.mrr_at_10:>7.3f}"
        )
    print(f"median search time per dialogue: {median_ms:.2f} ms")
    mine = rows[0][1]
    passed = mine.recall_at_5 >= TARGET_RECALL_AT_5 and mine.mrr_at_10 >= TARGET_MRR_AT_10
    verdict = "PASS" if passed else "MISS"
    print(
        f"targets recall@5 >= {TARGET_RECALL_AT_5} and MRR@10 >= {TARGET_MRR_AT_10}: {verdict} "
        f"(recall@5 {mine.recall_at_5:.3f}, MRR@10 {mine.mrr_at_10:.3f})"
    )
    aged, line = ranking_verdict(rows[0][1], rows[1][1])
    print(line)
    hybrid_passed = True
    if index is not None:
        print()
        print(
            f"embeddings: {os.environ['CTXGRAPH_EMBEDDING_MODEL']} at "
            f"{os.environ.get('OPENAI_BASE_URL', 'the default endpoint')}, query prefix "
            f"{os.environ.get('CTXGRAPH_EMBEDDING_QUERY_PREFIX', '')!r}, document prefix "
            f"{os.environ.get('CTXGRAPH_EMBEDDING_DOCUMENT_PREFIX', '')!r}"
        )
        hybrid_passed, lines = embedding_table(embedding_rows(memories, dialogues, index))
        print("\n".join(lines))
    return 0 if passed and aged and hybrid_passed else 1


if __name__ == "__main__":
    sys.exit(main())
