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

With ``CTXGRAPH_EMBEDDING_MODEL`` set (see ``ctxgraph.store.persistence.vector_index``), a
hybrid row is added: the same facts in a Store with that embedding model, BM25 fused with
vector similarity.

The data is not part of this repository. ``--data`` names either a folder holding
``MADial-Bench-zh-memory.json``, ``MADial-Bench-zh-dialogue.json`` and ``published_top20/``,
or a checkout of the MADial-Bench repository (``data/ch`` and ``embeddings/ch``); see
docs/benchmarks.md. Without the data the run stops with one line naming the missing path
and exit status 2.

Run ``python -m bench.retrieval_eval [--data ../shared/data/madial_zh]``.
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

from langgraph.store.memory import InMemoryStore

from ctxgraph.state.context import Context
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.persistence.vector_index import embedding_index
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


def ctxgraph_rankings(
    memories: dict[int, dict[str, Any]],
    dialogues: Sequence[Dialogue],
    *,
    event_dates: bool,
    index: Any = None,
) -> tuple[dict[int, list[int]], float]:
    """Store every memory with ``add_fact`` and rank them with ``search``; also the median ms.

    ``index`` (a Store index config) turns on hybrid search with that embedding model.
    """
    repository = MemoryRepository(InMemoryStore(index=index))
    now = datetime.now(UTC)
    for memory_id, record in memories.items():
        created = datetime.fromisoformat(record["time"]).replace(tzinfo=UTC) if event_dates else now
        repository.add_fact(
            _context(int(record["user-id"])),
            record["event"],
            key=f"memory_{memory_id}",
            created_at=created,
        )
    latest = max(datetime.fromisoformat(r["time"]) for r in memories.values())
    search_now = latest.replace(tzinfo=UTC) + timedelta(days=1) if event_dates else None
    rankings: dict[int, list[int]] = {}
    timings: list[float] = []
    for dialogue in dialogues:
        started = time.perf_counter()
        found = repository.search(_context(dialogue.user), dialogue.query, top_k=10, now=search_now)
        timings.append((time.perf_counter() - started) * 1000)
        rankings[dialogue.id] = [int(fact.id.removeprefix("memory_")) for fact in found]
    timings.sort()
    return rankings, timings[len(timings) // 2]


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
    args = parser.parse_args(argv)
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
    embeddings = embedding_index(os.environ)
    if embeddings is not None:
        hybrid, _ = ctxgraph_rankings(memories, dialogues, event_dates=False, index=embeddings)
        model = os.environ["CTXGRAPH_EMBEDDING_MODEL"]
        rows.append((f"ctxgraph hybrid ({model})", score(hybrid, dialogues)))
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
    return 0 if passed and aged else 1


if __name__ == "__main__":
    sys.exit(main())
