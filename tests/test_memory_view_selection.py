"""The auto-mode memory view carries the facts relevant to the turn, not the whole budget.

Sixty facts are stored, three of them about the user's order-lookup question. Every test
reads what the main model received through the real graph: the memory message is found
by its id prefix, wherever the request places it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

import ctxgraph.nodes.memory.selection as selection_module
import ctxgraph.store.memory.ranking as ranking_module
from ctxgraph.graph import build_graph
from ctxgraph.nodes.memory.render import FACTS_HEADING, render_view
from ctxgraph.nodes.memory.selection import select_view_facts, view_clock
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.settings_checks import SettingsError
from ctxgraph.state.tokens import count_text
from ctxgraph.store.memory.facts import Fact
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import ProfileUpdate
from tests.support.memory_view_case import (
    CORRECTION,
    PREFERENCE,
    QUESTION,
    RELEVANT,
    WEAK_MATCH,
    all_facts,
    seed,
)

MEMORY_ID_PREFIX = "ctxgraph-memory"
CONTEXT = Context(user_id="olga")
PROFILE = "Olga runs order support for the wholesale accounts."


def config(thread: str = "t") -> Any:
    return {"configurable": {"thread_id": thread}}


def graph_of(main: ScriptedChatModel, store: InMemoryStore, **settings: Any) -> Any:
    return build_graph(
        models=Models(main=main),
        settings=Settings(memory_extraction="off", **settings),
        checkpointer=InMemorySaver(),
        store=store,
        tools=[lookup_order],
    )


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order's status."""
    return f"order {order_id}: packed, pickup on Thursday"


def seeded_store(created_at: datetime | None = None) -> InMemoryStore:
    store = InMemoryStore()
    seed(MemoryRepository(store), CONTEXT, created_at)
    return store


def memory_message(request: Sequence[BaseMessage]) -> BaseMessage:
    (found,) = [m for m in request if str(m.id or "").startswith(MEMORY_ID_PREFIX)]
    return found


def view_sent(store: InMemoryStore, question: str = QUESTION, **settings: Any) -> str:
    """The memory view the main model receives for one turn asking ``question``."""
    main = ScriptedChatModel(script=["ok"])
    graph_of(main, store, **settings).invoke(
        {"messages": [("user", question)]}, config(), context=CONTEXT
    )
    return str(memory_message(main.requests[0]).content)


def fact_contents(view: str) -> list[str]:
    """The content of each fact line of ``view``, in order."""
    lines = view.splitlines()
    rows = lines[lines.index(FACTS_HEADING) + 1 :] if FACTS_HEADING in lines else []
    contents = [*all_facts(), CORRECTION, PREFERENCE]
    return [next(c for c in contents if f"] {c} (confidence" in row) for row in rows]


def test_the_view_holds_the_three_relevant_facts_the_correction_and_the_preference() -> None:
    view = view_sent(seeded_store())
    assert fact_contents(view) == [CORRECTION, *RELEVANT, PREFERENCE]
    assert WEAK_MATCH not in view  # shares "orders" with the question, not about it
    assert count_text(view) < 300


def test_the_cap_holds_and_keeps_the_best_matches() -> None:
    store = seeded_store()
    # Corrections have their own pool; the cap counts the other facts, matches first.
    assert fact_contents(view_sent(store, memory_view_max_facts=2)) == [
        CORRECTION,
        *RELEVANT[:2],
    ]
    assert fact_contents(view_sent(store, memory_view_max_facts=3)) == [CORRECTION, *RELEVANT]


def test_the_floor_holds() -> None:
    store = seeded_store()
    # At 1, only the best match; the correction and the preference show whatever the floor.
    assert fact_contents(view_sent(store, memory_view_min_score=1.0)) == [
        CORRECTION,
        RELEVANT[0],
        PREFERENCE,
    ]
    # A low floor lets the weak match in, never a fact that shares no word with the question.
    assert fact_contents(view_sent(store, memory_view_min_score=0.1)) == [
        CORRECTION,
        *RELEVANT,
        WEAK_MATCH,
        PREFERENCE,
    ]


def test_confidence_alone_never_passes_the_floor() -> None:
    now = datetime(2026, 3, 10, tzinfo=UTC)

    def fact(key: str, category: str, confidence: float, score: float) -> Fact:
        return Fact(
            id=key,
            key=key,
            content=key,
            category=category,
            confidence=confidence,
            created_at=now,
            confirmed_at=now,
            last_seen_at=now,
            source_thread=None,
            evidence=None,
            scope="user",
            score=score,
        )

    match = fact("match", "context", 0.7, 2.0)
    unmatched = fact("confident", "goal", 1.0, 0.0)  # offered whatever the query
    preference = fact("style", "preference", 0.8, 0.0)
    correction = replace(fact("fix", "context", 0.9, 0.0), is_correction=True)
    facts = [match, unmatched, correction, preference]
    assert select_view_facts(facts, min_score=0.01, max_facts=0) == [match, correction, preference]
    assert select_view_facts(facts, min_score=0, max_facts=0) == facts
    assert select_view_facts(facts, min_score=0, max_facts=1) == [match, correction]
    # Nothing matched: only what is shown regardless.
    assert select_view_facts([unmatched, preference], min_score=0.25, max_facts=12) == [preference]
    for bad in (-0.1, 1.5, float("nan"), True, "0.3"):
        with pytest.raises(ValueError, match="min_score"):
            select_view_facts(facts, min_score=bad, max_facts=0)  # type: ignore[arg-type]
    for cap in (-1, 2.5, False):
        with pytest.raises(ValueError, match="max_facts"):
            select_view_facts(facts, min_score=0, max_facts=cap)  # type: ignore[arg-type]


def test_the_budget_still_caps_the_view() -> None:
    store = seeded_store()
    full = fact_contents(view_sent(store))
    view = view_sent(store, memory_budget=150, correction_budget=60)
    assert count_text(view) <= 150
    shown = fact_contents(view)
    # Whole lines, in the order chosen, stopping at the first that does not fit.
    assert 0 < len(shown) < len(full)
    assert shown == full[: len(shown)]


def profile_update(content: str) -> ProfileUpdate:
    return ProfileUpdate(
        section="work_context",
        content=content,
        scope="user",
        durability="durable",
        authority="descriptive",
        confidence=0.9,
        evidence_message_id="m1",
        evidence_text=content,
    )


def test_floor_and_cap_at_zero_reproduce_the_budget_filling_view_and_the_profile_stays() -> None:
    store = seeded_store()
    repository = MemoryRepository(store)
    repository.update_profile(CONTEXT, profile_update(PROFILE))
    profile = repository.get_profile(CONTEXT)
    old = render_view(
        profile,
        repository.memory_candidates(CONTEXT, QUESTION),
        mode="auto",
        budget=Settings().memory_budget,
        correction_budget=Settings().correction_budget,
    )
    off = view_sent(store, memory_view_min_score=0, memory_view_max_facts=0)
    assert off == old
    assert len(fact_contents(off)) > 40 and count_text(off) > 1_900  # the budget, filled
    selected = view_sent(store)
    assert count_text(selected) < 350
    # The profile block is the same in both.
    head = old[: old.index(FACTS_HEADING)]
    assert PROFILE in head
    assert selected.startswith(head)


def test_the_view_is_byte_identical_across_the_calls_of_a_turn_and_across_turns() -> None:
    store = seeded_store()

    def call(n: int) -> AIMessage:
        args = {"order_id": "7731"}
        return AIMessage("", tool_calls=[{"name": "lookup_order", "args": args, "id": f"c{n}"}])

    main = ScriptedChatModel(script=[call(1), "first", call(2), "second"])
    graph = graph_of(main, store)
    for _ in range(2):
        graph.invoke({"messages": [("user", QUESTION)]}, config(), context=CONTEXT)
    assert len(main.requests) == 4  # two main calls in each of two turns
    views = [memory_message(request) for request in main.requests]
    assert len({(str(v.content), v.id) for v in views}) == 1
    assert fact_contents(str(views[0].content)) == [CORRECTION, *RELEVANT, PREFERENCE]


def test_the_view_does_not_change_with_the_time_of_day(monkeypatch: pytest.MonkeyPatch) -> None:
    day = datetime(2026, 3, 10, tzinfo=UTC)
    store = InMemoryStore()
    repository = MemoryRepository(store)
    for n in range(10):
        repository.add_fact(CONTEXT, f"Waters garden bed {n} twice a week.", key=f"bed_{n}")
    # Equal relevance; A is more confident but older, and its age in whole days ticks from
    # 44 to 45 at noon, while B's stays 44 all day: by the wall clock they swap at noon.
    older = "Sends every pallet through the north hub."
    newer = "Sends every pallet through the south hub."
    repository.add_fact(
        CONTEXT, older, key="north", confidence=0.9, created_at=day - timedelta(days=45, hours=-12)
    )
    repository.add_fact(
        CONTEXT,
        newer,
        key="south",
        confidence=0.88,
        created_at=day - timedelta(days=44) + timedelta(seconds=30),
    )
    question = "Which pallet hub?"
    morning, evening = day + timedelta(hours=1), day + timedelta(hours=23)

    def order(now: datetime) -> list[str]:
        found = repository.memory_candidates(CONTEXT, question, now=now)
        return [f.content for f in found if f.content in (older, newer)]

    assert order(morning) == [older, newer] and order(evening) == [newer, older]

    views = []
    for moment in (morning, evening):
        # Every clock the view could read says ``moment``: the loader's and the ranker's.
        frozen = frozen_clock(moment)
        monkeypatch.setattr(selection_module, "datetime", frozen)
        monkeypatch.setattr(ranking_module, "datetime", frozen)
        main = ScriptedChatModel(script=["ok"])
        graph_of(main, store).invoke(
            {"messages": [("user", question)]}, config(moment.isoformat()), context=CONTEXT
        )
        views.append(str(memory_message(main.requests[0]).content))
    assert views[0] == views[1]
    # Aged at the start of the day: B is 43 days old, A 44.
    assert views[0].index(newer) < views[0].index(older)


def frozen_clock(moment: datetime) -> type[datetime]:
    """A ``datetime`` class whose ``now`` is ``moment``."""

    class Frozen(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return moment if tz is None else moment.astimezone(tz)

    return Frozen


def test_view_clock_is_the_start_of_the_utc_day() -> None:
    assert view_clock(datetime(2026, 3, 10, 23, 59, tzinfo=UTC)) == datetime(
        2026, 3, 10, tzinfo=UTC
    )
    assert view_clock(datetime(2026, 3, 10, 7, 5)) == datetime(2026, 3, 10, tzinfo=UTC)
    late = datetime(2026, 3, 10, 23, 30, tzinfo=UTC).astimezone()
    assert view_clock(late) == datetime(2026, 3, 10, tzinfo=UTC)


def test_the_settings_are_checked_and_read_from_the_environment() -> None:
    defaults = Settings()
    assert (defaults.memory_view_min_score, defaults.memory_view_max_facts) == (0.25, 12)
    for bad in ({"memory_view_min_score": 1.2}, {"memory_view_min_score": -0.1}):
        with pytest.raises(SettingsError, match="memory_view_min_score"):
            Settings(**bad)
    with pytest.raises(SettingsError, match="memory_view_max_facts"):
        Settings(memory_view_max_facts=-1)
    read = Settings.from_env(
        {"CTXGRAPH_MEMORY_VIEW_MIN_SCORE": "0", "CTXGRAPH_MEMORY_VIEW_MAX_FACTS": "0"}
    )
    assert (read.memory_view_min_score, read.memory_view_max_facts) == (0, 0)


def test_memory_search_is_not_the_view() -> None:
    store = seeded_store()
    found = MemoryRepository(store).search(CONTEXT, QUESTION, top_k=10)
    # The search still returns every match, the weak one included, whatever the view keeps.
    assert [f.content for f in found] == [*RELEVANT, WEAK_MATCH]


async def test_the_async_loader_selects_the_same_view() -> None:
    store = seeded_store()
    main = ScriptedChatModel(script=["ok"])
    await graph_of(main, store).ainvoke(
        {"messages": [("user", QUESTION)]}, config("async"), context=CONTEXT
    )
    view = str(memory_message(main.requests[0]).content)
    assert fact_contents(view) == [CORRECTION, *RELEVANT, PREFERENCE]
    assert view == view_sent(store)
