"""Memory view selection: what the auto-mode view keeps, and its size, per (floor, cap).

Two cases, each rendered the way ``load_memory`` renders the view
(``memory_candidates`` -> ``select_view_facts`` -> ``render_view``, default budgets):

- ``cost session``: the cost benchmark's 60 stored facts (``bench.cost_session``) and
  its first 150 order-lookup messages: the view's tokens and fact lines per message;
- ``MADial-Bench zh``: each user's memories stored as facts, each dialogue before its
  test turn as the message (as ``bench.retrieval_eval``): the share of the gold memories
  the view holds (averaged over dialogues), and its tokens.

``0 / 0`` is the budget-filling view (no floor, no cap). Without the MADial data only the
first table is printed.

Run ``python -m bench.memory_view_eval [--data ../shared/data/madial_zh]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from langgraph.store.memory import InMemoryStore

from bench.cost_session import _order_id, _user_text, user_facts
from bench.retrieval_eval import (
    DEFAULT_DATA,
    _context,
    load_dialogues,
    load_memories,
    missing_data_message,
)
from ctxgraph.nodes.memory.render import render_view
from ctxgraph.nodes.memory.selection import select_view_facts, view_clock
from ctxgraph.state.context import Context
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import count_text
from ctxgraph.store.memory.facts import Fact
from ctxgraph.store.memory.repository import MemoryRepository

PAIRS: tuple[tuple[float, int], ...] = (
    (0, 0),
    (0, 8),
    (0, 12),
    (0, 20),
    (0.2, 0),
    (0.25, 0),
    (0.2, 12),
    (0.25, 10),
    (0.25, 12),
    (0.25, 15),
    (0.3, 10),
    (0.3, 12),
    (0.5, 8),
)
"""(memory_view_min_score, memory_view_max_facts) pairs measured."""

COST_TURNS = 150


@dataclass(frozen=True)
class Row:
    """One (floor, cap) pair's figures."""

    floor: float
    cap: int
    recall: float | None
    facts: float
    median_tokens: float
    mean_tokens: float


def _view(candidates: Sequence[Fact], floor: float, cap: int) -> str:
    settings = Settings()
    chosen = select_view_facts(candidates, min_score=floor, max_facts=cap)
    return render_view(
        None,
        chosen,
        mode="auto",
        budget=settings.memory_budget,
        correction_budget=settings.correction_budget,
    )


def _row(floor: float, cap: int, views: list[str], recalls: list[float] | None) -> Row:
    tokens = [count_text(view) for view in views]
    lines = [view.count("\n- [") for view in views]
    return Row(
        floor,
        cap,
        statistics.mean(recalls) if recalls else None,
        statistics.mean(lines),
        statistics.median(tokens),
        statistics.mean(tokens),
    )


def cost_rows() -> list[Row]:
    """The cost benchmark's 60 facts and order-lookup messages."""
    repository = MemoryRepository(InMemoryStore())
    context = Context(user_id="cost-bench")
    repository.add_facts(context, user_facts(60))
    now = view_clock()
    texts = [_user_text(i, _order_id(i, 7), 7, False) for i in range(COST_TURNS)]
    candidates = [repository.memory_candidates(context, text, now=now) for text in texts]
    return [
        _row(floor, cap, [_view(found, floor, cap) for found in candidates], None)
        for floor, cap in PAIRS
    ]


def madial_rows(data: Path) -> list[Row]:
    """Gold memories the view holds on MADial-Bench zh, and its size."""
    memories = load_memories(data)
    dialogues = load_dialogues(data)
    repository = MemoryRepository(InMemoryStore())
    for memory_id, record in memories.items():
        user = _context(int(record["user-id"]))
        repository.add_fact(user, record["event"], key=f"memory_{memory_id}")
    now = view_clock()
    candidates = {
        d.id: repository.memory_candidates(_context(d.user), d.query, now=now) for d in dialogues
    }
    rows = []
    for floor, cap in PAIRS:
        views, recalls = [], []
        for dialogue in dialogues:
            view = _view(candidates[dialogue.id], floor, cap)
            shown = {
                int(f.id.removeprefix("memory_"))
                for f in candidates[dialogue.id]
                if f"] {f.content} (confidence" in view
            }
            views.append(view)
            recalls.append(len(shown & dialogue.gold) / len(dialogue.gold))
        rows.append(_row(floor, cap, views, recalls))
    return rows


def table(title: str, rows: Sequence[Row]) -> str:
    """``rows`` as a text table under ``title``."""
    lines = [
        title,
        f"{'floor':>6} {'cap':>4} {'recall':>7} {'facts':>6} {'tok p50':>8} {'mean':>6}",
    ]
    for row in rows:
        recall = "-" if row.recall is None else f"{row.recall:.3f}"
        lines.append(
            f"{row.floor:>6} {row.cap:>4} {recall:>7} {row.facts:>6.1f} "
            f"{row.median_tokens:>8.0f} {row.mean_tokens:>6.0f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print both tables (the MADial one only when its data is there)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)
    print(table(f"cost session: 60 facts, {COST_TURNS} order-lookup messages", cost_rows()))
    problem = missing_data_message(args.data)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 0
    print()
    print(table("MADial-Bench zh: gold memories in the view", madial_rows(args.data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
