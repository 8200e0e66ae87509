"""One ranking everywhere: a bounded age factor, and the same order in every reader.

``MemoryRepository.search``, the ``memory_search`` tool, the ``load_memory`` view and
``ctxgraph memory search`` must put the same facts in the same order for one query, with
facts of different ages, and age may halve a fact's relevance but never bury it.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.nodes.memory.render import FACTS_HEADING, render_memory
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.messages import ORIGIN_KEY
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.persistence.connection import Persistence, open_async_persistence
from ctxgraph.store.search.scoring import (
    TIME_FACTOR_FLOOR,
    age_days,
    days_between,
    final_score,
    relevance_scores,
    score_at_age,
    time_factor,
    utc_micros,
)
from tests.support.cli import run_ctxgraph

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


# -- 1. the bounded age factor ------------------------------------------------------------


@pytest.mark.parametrize(
    ("days", "factor"),
    [
        (0, 1.0),
        (29, 1.0),
        (31, math.exp(-0.01)),
        (90, math.exp(-0.6)),
        (99, math.exp(-0.69)),
        (100, TIME_FACTOR_FLOOR),
        (365, TIME_FACTOR_FLOOR),
        (3650, TIME_FACTOR_FLOOR),
    ],
)
def test_time_factor_keeps_the_seed_curve_until_it_reaches_the_floor(
    days: int, factor: float
) -> None:
    assert time_factor(days) == pytest.approx(factor)
    assert final_score(-2.0, 0.5, NOW - timedelta(days=days), NOW) == pytest.approx(
        2.0 * factor + 0.1
    )


def test_a_year_old_fact_keeps_half_its_relevance() -> None:
    assert TIME_FACTOR_FLOOR == 0.5
    assert final_score(-4.0, 0.9, NOW - timedelta(days=365), NOW) == pytest.approx(2.18)


def test_a_clearly_better_old_match_beats_a_weak_recent_one() -> None:
    """The old fact matches every query word; the new one matches one. Age must not flip it."""
    repo = in_memory_repository()
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")
    repo.add_fact(
        context,
        "Maintains the payments ledger reconciliation service in Go",
        key="old",
        created_at=NOW - timedelta(days=400),
    )
    repo.add_fact(context, "Has a ledger notebook", key="new", created_at=NOW - timedelta(days=1))
    for filler in range(6):
        repo.add_fact(context, f"Unrelated hobby number {filler}", key=f"f{filler}", created_at=NOW)
    found = repo.search(context, "payments ledger reconciliation service", now=NOW)
    assert [fact.id for fact in found] == ["old", "new"]
    # With the seed's unbounded decay the year-old fact would have lost.
    old, new = found
    unbounded = math.exp(-0.01 * (400 - 30))
    assert (old.score - 0.2 * old.confidence) * unbounded / TIME_FACTOR_FLOOR < (
        new.score - 0.2 * new.confidence
    )


def test_age_still_breaks_near_ties_for_the_newer_fact() -> None:
    repo = in_memory_repository()
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")
    repo.add_fact(context, "Prefers tabs", key="old", created_at=NOW - timedelta(days=200))
    repo.add_fact(context, "Prefers tabs", key="new", created_at=NOW - timedelta(days=2))
    assert [fact.id for fact in repo.search(context, "tabs", now=NOW)] == ["new", "old"]


def in_memory_repository() -> MemoryRepository:
    return MemoryRepository(InMemoryStore())


# -- 2. the four readers agree ------------------------------------------------------------

QUERY = "rust compiler borrow checker"

FACTS = (
    # key, content, age in days, confidence
    ("daily", "Works on the rust compiler borrow checker every day", 400, 0.8),
    ("learning", "Is learning rust compiler internals", 5, 0.8),
    ("likes", "Likes rust", 2, 0.95),
    ("boards", "Collects antique checker boards", 200, 0.99),
    ("crates", "Publishes rust crates", 60, 0.7),
)


def _seed(store: Any, context: Context) -> list[str]:
    repo = MemoryRepository(store)
    now = datetime.now(UTC)
    for key, content, age, confidence in FACTS:
        repo.add_fact(
            context,
            content,
            key=key,
            confidence=confidence,
            created_at=now - timedelta(days=age),
        )
    repo.add_fact(context, "Drinks green tea", key="tea", confidence=1.0)
    return [content for _, content, _, _ in FACTS]


def _view_contents(request: list[BaseMessage], known: list[str]) -> list[str]:
    view = next(m for m in request if m.additional_kwargs.get(ORIGIN_KEY) == "memory")
    lines = str(view.content).splitlines()
    facts = lines[lines.index(FACTS_HEADING) + 1 :]
    found = [next(c for c in known if c in line) for line in facts if any(c in line for c in known)]
    return found


def test_search_tool_view_and_cli_agree_on_order(
    persistence: Persistence, python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    user = f"u-{uuid.uuid4().hex[:10]}"
    context = Context(user_id=user)
    contents = _seed(persistence.store, context)

    repository = [f.content for f in MemoryRepository(persistence.store).search(context, QUERY)]
    assert sorted(repository) == sorted(contents)
    # The facts are chosen so that age changes the order: a ranker that ignores age
    # (plain relevance) or ranks by confidence would disagree.
    relevance = relevance_scores(QUERY, contents)
    by_relevance = [c for _, c in sorted(zip(relevance, contents, strict=True), reverse=True)]
    assert repository != by_relevance
    assert repository[0] != max(FACTS, key=lambda fact: fact[3])[1]

    call = AIMessage(
        content="",
        tool_calls=[{"name": "memory_search", "args": {"query": QUERY, "limit": 5}, "id": "s1"}],
    )
    main = ScriptedChatModel(script=[call, "done"])
    graph = build_graph(
        models=Models(main=main),
        # Auto mode for the view, with memory_search bound too.
        settings=Settings(memory_extraction="off", memory_search_in_auto=True),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )
    result = graph.invoke(
        {"messages": [("user", QUERY)]},
        {"configurable": {"thread_id": thread_id}},
        context=context,
    )
    tool_message = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    tool = [row["content"] for row in json.loads(str(tool_message.content))]
    view = _view_contents(main.requests[0], contents)

    cli = run_ctxgraph(python, subprocess_env, "memory", "search", "--user", user, QUERY)
    assert cli.returncode == 0, cli.stderr
    printed = [next(c for c in contents if c in line) for line in cli.stdout.splitlines()]

    assert tool == repository
    assert view == repository
    assert printed == repository


async def test_async_search_and_view_agree_with_sync(
    persistence: Persistence, database_uri: str
) -> None:
    context = Context(user_id=f"u-{uuid.uuid4().hex[:10]}")
    contents = _seed(persistence.store, context)
    sync = [f.content for f in MemoryRepository(persistence.store).search(context, QUERY)]
    candidates = MemoryRepository(persistence.store).memory_candidates(context, QUERY)
    assert [f.content for f in candidates[: len(contents)]] == sync
    assert candidates[-1].content == "Drinks green tea"  # leading facts follow the matches
    async with open_async_persistence(database_uri) as opened:
        repo = MemoryRepository(opened.store)
        found = [f.content for f in await repo.asearch(context, QUERY)]
        offered = await repo.amemory_candidates(context, QUERY)
    assert found == sync
    assert [f.content for f in offered] == [f.content for f in candidates]


def test_render_keeps_a_ranked_order_and_ranks_plain_facts_with_final_score() -> None:
    now = datetime.now(UTC)

    def fact(content: str, confidence: float, age: int) -> dict[str, Any]:
        created = (now - timedelta(days=age)).isoformat()
        return {
            "content": content,
            "category": "context",
            "confidence": confidence,
            "created_at": created,
        }

    facts = [fact("Likes rust", 0.9, 1), fact("Works on the rust compiler daily", 0.9, 400)]
    ranked = render_memory(None, facts, ranked=True, query="rust compiler").splitlines()
    assert [line.split("] ")[1].split(" (")[0] for line in ranked[2:]] == [
        "Likes rust",
        "Works on the rust compiler daily",
    ]
    # Unranked with a query: relevance decayed by age (bounded), plus confidence.
    plain = render_memory(None, facts, query="rust compiler").splitlines()
    scores = relevance_scores("rust compiler", [f["content"] for f in facts])
    expected = sorted(
        facts,
        key=lambda f: -final_score(-scores[facts.index(f)], f["confidence"], f["created_at"], now),
    )
    assert [line.split("] ")[1].split(" (")[0] for line in plain[2:]] == [
        f["content"] for f in expected
    ]


@pytest.mark.parametrize(
    "age",
    [
        timedelta(0),
        timedelta(days=30) - timedelta(microseconds=1),
        timedelta(days=30),
        timedelta(days=31) - timedelta(microseconds=1),
        timedelta(days=400, hours=5),
        -timedelta(days=2),
    ],
)
def test_the_rankers_day_count_matches_final_scores(age: timedelta) -> None:
    """``rank`` counts days from cached timestamps; it must count exactly as age_days."""
    created = NOW - age
    for moment in (created, created.isoformat(), created.replace(tzinfo=None).isoformat()):
        days = days_between(utc_micros(moment), utc_micros(NOW))
        assert days == age_days(moment, NOW)
        assert score_at_age(-1.5, 0.7, days) == final_score(-1.5, 0.7, moment, NOW)
