"""Fact search: the final score, the tokenizer, ranking, isolation and index freshness."""

from __future__ import annotations

import json
import math
import threading
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres import PostgresStore
from psycopg.conninfo import make_conninfo

from ctxgraph.graph import build_graph
from ctxgraph.state.context import Context
from ctxgraph.state.models import Models
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.facts import Fact
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import Decision, FactCandidate
from ctxgraph.store.namespaces import project_facts, user_facts
from ctxgraph.store.persistence.change_tracking import install_change_tracking
from ctxgraph.store.persistence.connection import Persistence, open_async_persistence
from ctxgraph.store.search import index as search_index
from ctxgraph.store.search.index import fact_index_cache
from ctxgraph.store.search.scoring import Bm25Index, final_score, tokenize
from tests.support.cli import run_module

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
"""The fixed "now" of every ranking test."""

ONE_DOC_RELEVANCE = math.log(4 / 3)
"""BM25 relevance of a one-term query against the only document of a namespace (tf=1)."""

TWO_DOC_RELEVANCE = math.log(1.2)
"""BM25 relevance of a one-term query against each of two equally long matching documents."""


# -- helpers ------------------------------------------------------------------------------


def days_ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


def unique(prefix: str) -> str:
    """An identity label no other test (or earlier session on the same database) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def contents(facts: list[Fact]) -> list[str]:
    return [fact.content for fact in facts]


def memory_repo() -> MemoryRepository:
    return MemoryRepository(InMemoryStore())


def candidate(key: str, content: str, confidence: float = 0.9) -> FactCandidate:
    return FactCandidate(
        key=key,
        content=content,
        category="preference",
        scope="user",
        durability="durable",
        authority="descriptive",
        confidence=confidence,
        evidence_message_id="m1",
        evidence_text=content,
    )


ACCEPTED = Decision(accepted=True, target="user", reason="test")


def run_child(python: str, env: dict[str, str], *args: str) -> str:
    """Run tests/support/search_child.py in its own interpreter; return its stdout."""
    done = run_module(python, env, "tests.support.search_child", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(params=["memory", "postgres"])
def any_store(request: pytest.FixtureRequest) -> BaseStore:
    """An InMemoryStore, or the Postgres Store on the session database."""
    if request.param == "memory":
        return InMemoryStore()
    persistence: Persistence = request.getfixturevalue("persistence")
    return persistence.store


@pytest.fixture
def counted_tokenize(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the fact index tokenizes from now on, in call order."""
    calls: list[str] = []

    def counting(text: str) -> list[str]:
        calls.append(text)
        return tokenize(text)

    monkeypatch.setattr(search_index, "tokenize", counting)
    return calls


# -- 1. final_score -----------------------------------------------------------------------


def test_final_score_within_grace_is_relevance_plus_confidence() -> None:
    assert final_score(-0.8, 0.9, days_ago(10), NOW) == pytest.approx(0.98)


def test_final_score_decays_relevance_after_thirty_days() -> None:
    expected = 0.8 * math.exp(-0.6) + 0.18
    assert expected == pytest.approx(0.619049, abs=1e-6)
    assert final_score(-0.8, 0.9, days_ago(90), NOW) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("age", "factor"),
    [
        (timedelta(days=29), 1.0),
        (timedelta(days=30) - timedelta(seconds=1), 1.0),
        (timedelta(days=30), 1.0),
        (timedelta(days=31) - timedelta(seconds=1), 1.0),
        (timedelta(days=31), math.exp(-0.01)),
    ],
    ids=["29d", "30d-1s", "30d", "31d-1s", "31d"],
)
def test_final_score_decay_starts_after_day_thirty(age: timedelta, factor: float) -> None:
    assert final_score(-0.8, 0.9, NOW - age, NOW) == pytest.approx(0.8 * factor + 0.18)


def test_final_score_accepts_iso_strings_and_naive_datetimes_as_utc() -> None:
    created = days_ago(90)
    expected = 0.8 * math.exp(-0.6) + 0.18
    assert final_score(-0.8, 0.9, created.isoformat(), NOW) == pytest.approx(expected)
    assert final_score(-0.8, 0.9, created.replace(tzinfo=None), NOW) == pytest.approx(expected)
    assert final_score(-0.8, 0.9, created, NOW.replace(tzinfo=None)) == pytest.approx(expected)

    at_31_days = 0.8 * math.exp(-0.01) + 0.18
    naive_iso = days_ago(31).replace(tzinfo=None).isoformat()
    assert final_score(-0.8, 0.9, naive_iso, NOW) == pytest.approx(at_31_days)
    # 31 days in UTC; read without its offset it would look 30 days and 16 hours old.
    tokyo_iso = days_ago(31).astimezone(timezone(timedelta(hours=8))).isoformat()
    assert final_score(-0.8, 0.9, tokyo_iso, NOW) == pytest.approx(at_31_days)


def test_final_score_age_is_never_negative() -> None:
    assert final_score(-0.8, 0.9, NOW + timedelta(days=400), NOW) == pytest.approx(0.98)


# -- 2. tokenizer, through MemoryRepository.search -----------------------------------------


def test_chinese_word_finds_a_chinese_fact_and_nothing_unrelated() -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    repo.add_fact(context, "用户偏好用中文解释技术问题", key="language")
    repo.add_fact(context, "喜欢喝咖啡", key="drink")
    repo.add_fact(context, "Works on a Rust compiler", key="work")

    assert contents(repo.search(context, "中文", now=NOW)) == ["用户偏好用中文解释技术问题"]
    assert contents(repo.search(context, "请用中文回答", now=NOW)) == ["用户偏好用中文解释技术问题"]
    assert contents(repo.search(context, "咖啡", now=NOW)) == ["喜欢喝咖啡"]


def test_english_words_match_across_case_and_plural_forms() -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    repo.add_fact(context, "The user prefer dark themes", key="theme")
    repo.add_fact(context, "Writes unit tests before code", key="testing")
    repo.add_fact(context, "Uses two monitors", key="desk")

    for query in ("prefers", "PREFER", "Prefer", "ＰＲＥＦＥＲＳ"):
        assert contents(repo.search(context, query, now=NOW)) == ["The user prefer dark themes"]
    assert contents(repo.search(context, "theme", now=NOW)) == ["The user prefer dark themes"]
    assert contents(repo.search(context, "TEST", now=NOW)) == ["Writes unit tests before code"]
    assert contents(repo.search(context, "monitor", now=NOW)) == ["Uses two monitors"]


@pytest.mark.parametrize("query", ["", "   ", "the and of", "?!... ,;", "的了吗？！", "The user's"])
def test_query_of_only_stop_words_or_punctuation_finds_nothing(query: str) -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    repo.add_fact(context, "The user prefer the dark theme of the editor", key="theme")
    repo.add_fact(context, "用户的母语是中文", key="language")
    assert repo.search(context, query, now=NOW) == []


# -- 3. ranking -----------------------------------------------------------------------------


def test_higher_confidence_wins_between_equally_relevant_facts() -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    # The surer fact loses both tie-breaks (older, later id), so only confidence can lift it.
    repo.add_fact(context, "Drinks green tea", key="z_sure", confidence=0.9, created_at=days_ago(5))
    repo.add_fact(
        context, "Drinks black tea", key="a_unsure", confidence=0.6, created_at=days_ago(1)
    )

    found = repo.search(context, "tea", now=NOW)

    assert [fact.id for fact in found] == ["z_sure", "a_unsure"]
    assert [fact.score for fact in found] == pytest.approx(
        [TWO_DOC_RELEVANCE + 0.18, TWO_DOC_RELEVANCE + 0.12]
    )


def test_ninety_day_old_fact_ranks_below_ten_day_old_one() -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    repo.add_fact(context, "Drinks green tea", key="a_old", created_at=days_ago(90))
    repo.add_fact(context, "Drinks black tea", key="b_new", created_at=days_ago(10))

    found = repo.search(context, "tea", now=NOW)

    assert [fact.id for fact in found] == ["b_new", "a_old"]
    assert [fact.score for fact in found] == pytest.approx(
        [TWO_DOC_RELEVANCE + 0.18, TWO_DOC_RELEVANCE * math.exp(-0.6) + 0.18]
    )


@pytest.mark.parametrize(
    ("lover_age", "order"), [(400, ["fresh", "lover"]), (20, ["lover", "fresh"])]
)
def test_decay_can_put_a_less_relevant_fresh_fact_first(lover_age: int, order: list[str]) -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    repo.add_fact(context, "Tea tea tea lover", key="lover", created_at=days_ago(lover_age))
    repo.add_fact(context, "Sometimes drinks tea with friends", key="fresh", created_at=days_ago(1))

    assert [fact.id for fact in repo.search(context, "tea", now=NOW)] == order


def reconfirmed_and_unconfirmed(
    repo: MemoryRepository, context: Context, now: datetime = NOW
) -> None:
    """'tea' was stored 90 days ago and re-confirmed 2 days ago; 'coffee' is 40 days old."""

    def before(days: float) -> datetime:
        return now - timedelta(days=days)

    tea = candidate("drink_tea", "Prefers tea")
    assert repo.remember(context, tea, ACCEPTED, thread_id="t1", now=before(90)) is not None
    confirmed = repo.remember(context, tea, ACCEPTED, thread_id="t2", now=before(2), confirmed=True)
    assert confirmed is not None
    assert (confirmed.created_at, confirmed.confirmed_at) == (before(90), before(2))
    repo.add_fact(context, "Prefers coffee", key="drink_coffee", created_at=before(40))


def test_age_from_confirmed_keeps_a_reconfirmed_fact_undecayed() -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    reconfirmed_and_unconfirmed(repo, context)

    by_confirmation = repo.search(context, "prefers", now=NOW, age_from="confirmed")
    assert [fact.id for fact in by_confirmation] == ["drink_tea", "drink_coffee"]
    assert [fact.score for fact in by_confirmation] == pytest.approx(
        [TWO_DOC_RELEVANCE + 0.18, TWO_DOC_RELEVANCE * math.exp(-0.1) + 0.18]
    )

    by_creation = repo.search(context, "prefers", now=NOW, age_from="created")
    assert [fact.id for fact in by_creation] == ["drink_coffee", "drink_tea"]
    assert [fact.score for fact in by_creation] == pytest.approx(
        [TWO_DOC_RELEVANCE * math.exp(-0.1) + 0.18, TWO_DOC_RELEVANCE * math.exp(-0.6) + 0.18]
    )


def memory_search_rows(graph: Any, context: Context) -> list[str]:
    """Ids the graph's ``memory_search`` tool returns when the model searches 'prefers'."""
    result = graph.invoke({"messages": [("user", "What do I drink?")]}, context=context)
    tool_message = result["messages"][2]
    assert isinstance(tool_message, ToolMessage) and tool_message.status == "success"
    return [row["id"] for row in json.loads(str(tool_message.content))]


@pytest.mark.parametrize(
    ("built", "order"),
    [
        (Settings(memory_age_from="confirmed"), ["drink_tea", "drink_coffee"]),
        (Settings(), ["drink_coffee", "drink_tea"]),
    ],
    ids=["confirmed", "default"],
)
def test_memory_search_tool_ages_facts_by_the_graphs_memory_age_from(
    built: Settings, order: list[str]
) -> None:
    # The graph's build-time memory_age_from reaches the tool even when the run's context
    # carries settings of its own that do not set it: run settings merge onto the graph's.
    store = InMemoryStore()
    search = AIMessage(
        content="", tool_calls=[{"name": "memory_search", "args": {"query": "prefers"}, "id": "s"}]
    )
    graph = build_graph(
        models=Models(main=ScriptedChatModel(script=[search, "done"])),
        settings=replace(built, memory_mode="tool", memory_extraction="off"),
        store=store,
    )
    context = Context(user_id="u1", settings=Settings(system_prompt="Answer briefly."))
    reconfirmed_and_unconfirmed(MemoryRepository(store), context, now=datetime.now(UTC))

    assert memory_search_rows(graph, context) == order


def test_an_explicit_age_from_argument_wins_over_the_context_settings() -> None:
    repo = memory_repo()
    confirming = Context(user_id="u1", settings=Settings(memory_age_from="confirmed"))
    reconfirmed_and_unconfirmed(repo, confirming)

    assert [f.id for f in repo.search(confirming, "prefers", now=NOW, age_from="created")] == [
        "drink_coffee",
        "drink_tea",
    ]
    plain = Context(user_id="u1")
    assert [f.id for f in repo.search(plain, "prefers", now=NOW, age_from="confirmed")] == [
        "drink_tea",
        "drink_coffee",
    ]


def test_single_fact_score_is_the_documented_formula() -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    repo.add_fact(context, "Lives in Kyoto", key="city", confidence=0.7, created_at=days_ago(60))

    (found,) = repo.search(context, "kyoto", now=NOW)

    assert found.score == pytest.approx(ONE_DOC_RELEVANCE * math.exp(-0.3) + 0.2 * 0.7)
    assert found.score > 0


def test_result_scores_equal_final_score_of_the_bm25_relevance() -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    facts = {
        "editor": ("Uses Neovim as the Python editor", 0.9, days_ago(3)),
        "style": ("Likes Python type hints and short Python functions", 0.5, days_ago(45)),
        "job": ("Backend engineer writing Python services", 0.8, days_ago(200)),
        "pet": ("Has a cat called Miso", 0.95, days_ago(1)),
    }
    for key, (content, confidence, created) in facts.items():
        repo.add_fact(context, content, key=key, confidence=confidence, created_at=created)
    index = Bm25Index({key: tokenize(content) for key, (content, _, _) in facts.items()})
    raw = dict(index.search(tokenize("python editor"), 10))

    found = repo.search(context, "python editor", now=NOW)

    expected = {key: final_score(raw[key], facts[key][1], facts[key][2], NOW) for key in raw}
    assert set(raw) == {"editor", "style", "job"}
    assert [fact.id for fact in found] == sorted(expected, key=lambda key: -expected[key])
    assert {fact.id: fact.score for fact in found} == pytest.approx(expected)


# -- 4. top_k and argument checks -----------------------------------------------------------


def test_results_never_exceed_top_k() -> None:
    repo = memory_repo()
    context = Context(user_id="u1", project_id="p1")
    for number, confidence in enumerate([0.2, 0.4, 0.6, 0.8]):
        repo.add_fact(context, f"Python note u{number}", key=f"u{number}", confidence=confidence)
    for number, confidence in enumerate([0.3, 0.5, 0.7, 0.9]):
        repo.add_fact(
            context,
            f"Python note p{number}",
            key=f"p{number}",
            confidence=confidence,
            scope="project",
        )

    assert [f.id for f in repo.search(context, "python", top_k=3, now=NOW)] == ["p3", "u3", "p2"]
    assert [f.id for f in repo.search(context, "python", top_k=2, now=NOW)] == ["p3", "u3"]
    assert len(repo.search(context, "python", top_k=50, now=NOW)) == 8
    for top_k in range(1, 10):
        assert len(repo.search(context, "python note", top_k=top_k, now=NOW)) == min(top_k, 8)


@pytest.mark.parametrize("top_k", [0, -1, True, False, "3", 2.0, None])
async def test_invalid_top_k_is_refused(top_k: Any) -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    repo.add_fact(context, "Lives in Kyoto")
    with pytest.raises(ValueError, match="top_k"):
        repo.search(context, "kyoto", top_k=top_k)
    with pytest.raises(ValueError, match="top_k"):
        await repo.asearch(context, "kyoto", top_k=top_k)


@pytest.mark.parametrize("query", [None, 3, b"kyoto", ["kyoto"]])
async def test_non_string_query_is_refused(query: Any) -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    repo.add_fact(context, "Lives in Kyoto")
    with pytest.raises(ValueError, match="query"):
        repo.search(context, query)
    with pytest.raises(ValueError, match="query"):
        await repo.asearch(context, query)


# -- 5. isolation ---------------------------------------------------------------------------


def test_search_sees_only_this_user_agent_and_project(any_store: BaseStore) -> None:
    repo = MemoryRepository(any_store)
    alice, bob = unique("alice"), unique("bob")
    p1, p2 = unique("p1"), unique("p2")
    stored = {
        "alice coder": Context(user_id=alice, agent_name="coder"),
        "alice writer": Context(user_id=alice, agent_name="writer"),
        "bob coder": Context(user_id=bob, agent_name="coder"),
        "project one": Context(user_id=alice, project_id=p1),
        "project two": Context(user_id=bob, project_id=p2),
    }
    for label, context in stored.items():
        scope = "project" if context.project_id else "user"
        repo.add_fact(context, f"Kyoto trip notes of {label}", scope=scope)

    def found(context: Context) -> set[str]:
        return {fact.content for fact in repo.search(context, "kyoto", top_k=10, now=NOW)}

    assert found(Context(user_id=alice, agent_name="coder")) == {"Kyoto trip notes of alice coder"}
    assert found(Context(user_id=alice, agent_name="writer")) == {
        "Kyoto trip notes of alice writer"
    }
    assert found(Context(user_id=bob, agent_name="coder")) == {"Kyoto trip notes of bob coder"}
    assert found(Context(user_id=bob, agent_name="writer")) == set()
    assert found(Context(user_id=alice, agent_name="coder", project_id=p1)) == {
        "Kyoto trip notes of alice coder",
        "Kyoto trip notes of project one",
    }
    assert found(Context(user_id=bob, agent_name="coder", project_id=p1)) == {
        "Kyoto trip notes of bob coder",
        "Kyoto trip notes of project one",
    }
    assert found(Context(user_id=alice, agent_name="writer", project_id=p2)) == {
        "Kyoto trip notes of alice writer",
        "Kyoto trip notes of project two",
    }
    assert found(Context(user_id=unique("carol"), project_id=unique("p3"))) == set()
    scopes = {f.content: f.scope for f in repo.search(stored["project one"], "kyoto", now=NOW)}
    assert scopes == {"Kyoto trip notes of project one": "project"}


def test_a_namespace_nested_under_the_searched_one_is_not_searched(any_store: BaseStore) -> None:
    repo = MemoryRepository(any_store)
    nested = Context(user_id="projects", agent_name="facts")
    project = Context(user_id=unique("u"), project_id="agents")
    # The project's namespace is a prefix of that user's namespace.
    assert user_facts("projects", "facts")[:-1] == project_facts("agents")
    for namespace, key in [
        (user_facts("projects", "facts"), "nested_kyoto"),
        (project_facts("agents"), "project_kyoto"),
    ]:
        any_store.delete(namespace, key)
    repo.add_fact(nested, "Kyoto notes of the nested user", key="nested_kyoto")
    repo.add_fact(project, "Kyoto notes of the project", key="project_kyoto", scope="project")

    assert contents(repo.search(project, "kyoto")) == ["Kyoto notes of the project"]
    assert contents(repo.search(nested, "kyoto")) == ["Kyoto notes of the nested user"]
    assert contents(repo.search(nested, "project")) == []


# -- 6. freshness in one process ------------------------------------------------------------


def test_search_sees_adds_forgets_and_updates_at_once(any_store: BaseStore) -> None:
    repo = MemoryRepository(any_store)
    context = Context(user_id=unique("u"))
    repo.add_fact(context, "Lives in Kyoto", key="home_city")
    assert contents(repo.search(context, "kyoto")) == ["Lives in Kyoto"]

    repo.add_fact(context, "Visits Kyoto every spring", key="trips")
    assert sorted(contents(repo.search(context, "kyoto"))) == [
        "Lives in Kyoto",
        "Visits Kyoto every spring",
    ]

    assert repo.forget(context, "trips") is True
    assert contents(repo.search(context, "kyoto")) == ["Lives in Kyoto"]

    repo.add_fact(context, "Lives in Osaka", key="home_city")
    assert repo.search(context, "kyoto") == []
    assert contents(repo.search(context, "osaka")) == ["Lives in Osaka"]


# -- 7. freshness across processes ----------------------------------------------------------


def test_search_sees_writes_of_another_process(
    persistence: Persistence, python: str, subprocess_env: dict[str, str]
) -> None:
    repo = MemoryRepository(persistence.store)
    user = unique("u")
    context = Context(user_id=user)
    repo.add_fact(context, "Works on a Rust compiler", key="work")
    assert repo.search(context, "lisbon") == []
    assert contents(repo.search(context, "rust")) == ["Works on a Rust compiler"]

    assert run_child(python, subprocess_env, "add", user, "home", "Lives in Lisbon") == "added home"
    assert contents(repo.search(context, "lisbon")) == ["Lives in Lisbon"]

    assert run_child(python, subprocess_env, "add", user, "home", "Lives in Porto") == "added home"
    assert repo.search(context, "lisbon") == []
    assert contents(repo.search(context, "porto")) == ["Lives in Porto"]

    assert run_child(python, subprocess_env, "forget", user, "home") == "forgot home"
    assert repo.search(context, "porto") == []
    assert contents(repo.search(context, "rust")) == ["Works on a Rust compiler"]


# -- 8. the async path ----------------------------------------------------------------------


async def test_asearch_ranks_like_search_and_sees_async_writes(
    database_uri: str, persistence: Persistence
) -> None:
    context = Context(user_id=unique("u"), project_id=unique("p"))
    sync_repo = MemoryRepository(persistence.store)
    async with open_async_persistence(database_uri) as opened:
        repo = MemoryRepository(opened.store)
        for key, content, confidence, age in [
            ("editor", "Uses Neovim as the Python editor", 0.9, 3),
            ("style", "Likes Python type hints", 0.5, 45),
            ("job", "Backend engineer writing Python services", 0.8, 200),
            ("pet", "Has a cat called Miso", 0.95, 1),
        ]:
            await repo.aadd_fact(
                context, content, key=key, confidence=confidence, created_at=days_ago(age)
            )
        await repo.aadd_fact(context, "The project is written in Python 3.12", scope="project")

        ranked = await repo.asearch(context, "python editor", top_k=10, now=NOW)
        expected = sync_repo.search(context, "python editor", top_k=10, now=NOW)
        assert [(f.id, f.scope) for f in ranked] == [(f.id, f.scope) for f in expected]
        assert [f.score for f in ranked] == pytest.approx([f.score for f in expected])
        assert [f.id for f in ranked][:1] == ["editor"]
        assert len(ranked) == 4

        assert await repo.asearch(context, "lisbon") == []
        await repo.aadd_fact(context, "Lives in Lisbon", key="home")
        assert contents(await repo.asearch(context, "lisbon")) == ["Lives in Lisbon"]
        assert await repo.aforget(context, "home") is True
        assert await repo.asearch(context, "lisbon") == []


# -- 9. incremental rebuilds ----------------------------------------------------------------


def test_refresh_retokenizes_only_new_or_changed_facts(
    any_store: BaseStore, counted_tokenize: list[str]
) -> None:
    repo = MemoryRepository(any_store)
    context = Context(user_id=unique("u"))
    for number in range(5):
        repo.add_fact(context, f"Python note number n{number}", key=f"n{number}")

    assert len(repo.search(context, "python", top_k=10)) == 5
    assert len(counted_tokenize) == 5

    counted_tokenize.clear()
    assert len(repo.search(context, "python", top_k=10)) == 5
    assert counted_tokenize == []

    repo.add_fact(context, "Python note number n5", key="n5")
    assert len(repo.search(context, "python", top_k=10)) == 6
    assert counted_tokenize == ["Python note number n5"]

    counted_tokenize.clear()
    repo.add_fact(context, "Rust note number n2", key="n2")
    assert len(repo.search(context, "python", top_k=10)) == 5
    assert counted_tokenize == ["Rust note number n2"]


async def test_async_refresh_retokenizes_only_the_new_fact(
    database_uri: str, counted_tokenize: list[str]
) -> None:
    context = Context(user_id=unique("u"))
    async with open_async_persistence(database_uri) as opened:
        repo = MemoryRepository(opened.store)
        for number in range(5):
            await repo.aadd_fact(context, f"Python note number n{number}", key=f"n{number}")
        assert len(await repo.asearch(context, "python", top_k=10)) == 5
        counted_tokenize.clear()

        await repo.aadd_fact(context, "Python note number n5", key="n5")
        assert len(await repo.asearch(context, "python", top_k=10)) == 6
        assert counted_tokenize == ["Python note number n5"]


def test_cache_is_kept_per_store(counted_tokenize: list[str]) -> None:
    first, second = memory_repo(), memory_repo()
    context = Context(user_id="u1")
    first.add_fact(context, "Lives in Kyoto", key="city")
    second.add_fact(context, "Lives in Osaka", key="city")
    assert contents(first.search(context, "lives")) == ["Lives in Kyoto"]
    assert contents(second.search(context, "lives")) == ["Lives in Osaka"]
    fact_index_cache.clear()
    counted_tokenize.clear()
    assert contents(first.search(context, "kyoto")) == ["Lives in Kyoto"]
    assert counted_tokenize == ["Lives in Kyoto"]


# -- edge cases: stop words, ties at the candidate cut-off, commit order ------------------


def test_stop_words_ending_in_s_are_dropped() -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    repo.add_fact(context, "This laptop runs Linux", key="laptop")
    repo.add_fact(context, "Does yoga every morning", key="yoga")

    assert repo.search(context, "Does this?", now=NOW) == []


def test_confidence_decides_among_more_ties_than_candidates() -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    for key, confidence in [("a_tea", 0.5), ("b_vim", 0.6), ("c_rust", 0.95)]:
        repo.add_fact(context, f"Prefers {key[2:]}", key=key, confidence=confidence)

    assert [fact.id for fact in repo.search(context, "prefers", top_k=1, now=NOW)] == ["c_rust"]


def test_age_decides_among_more_ties_than_candidates() -> None:
    repo = memory_repo()
    context = Context(user_id="u1")
    repo.add_fact(context, "Prefers tea", key="a_tea", created_at=days_ago(400))
    repo.add_fact(context, "Prefers vim", key="b_vim", created_at=days_ago(400))
    repo.add_fact(context, "Prefers rust", key="c_rust", created_at=days_ago(1))

    assert [fact.id for fact in repo.search(context, "prefers", top_k=1, now=NOW)] == ["c_rust"]


def test_writes_to_one_namespace_commit_in_order_and_every_one_is_seen(
    persistence: Persistence, database_uri: str
) -> None:
    # With change tracking installed (open_persistence does it), a write waits for an open
    # transaction that wrote the same namespace, so no commit can hide behind a newer one.
    repo = MemoryRepository(persistence.store)
    context = Context(user_id=unique("u"))
    repo.add_fact(context, "Lives in Kyoto", key="home")
    assert contents(repo.search(context, "lives")) == ["Lives in Kyoto"]
    with psycopg.connect(database_uri, autocommit=True) as connection:
        other_writer = MemoryRepository(PostgresStore(connection))
        with connection.transaction():
            other_writer.add_fact(context, "Lives in Osaka", key="home")
            waiting = threading.Thread(
                target=_write_in_own_connection,
                args=(database_uri, context, "Uses Neovim", "editor"),
            )
            waiting.start()
            waiting.join(timeout=1.0)
            assert waiting.is_alive()  # blocked behind the open transaction
            assert contents(repo.search(context, "lives")) == ["Lives in Kyoto"]
        waiting.join(timeout=10)
        assert not waiting.is_alive()
    assert contents(repo.search(context, "lives")) == ["Lives in Osaka"]
    assert contents(repo.search(context, "neovim")) == ["Uses Neovim"]


def _write_in_own_connection(uri: str, context: Context, content: str, key: str) -> None:
    with psycopg.connect(uri, autocommit=True) as connection:
        MemoryRepository(PostgresStore(connection)).add_fact(context, content, key=key)


def test_without_change_tracking_an_update_committed_late_is_still_seen(
    database_uri: str,
) -> None:
    # A database where the trigger was never installed: the version is an aggregate whose
    # fingerprint moves with any row's update time, even one older than the newest.
    name = unique("untracked").replace("-", "_")
    with psycopg.connect(database_uri, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    uri = make_conninfo(database_uri, dbname=name)
    try:
        with psycopg.connect(uri, autocommit=True) as setup_connection:
            PostgresStore(setup_connection).setup()
        with (
            psycopg.connect(uri, autocommit=True) as mine,
            psycopg.connect(uri, autocommit=True) as theirs,
        ):
            repo = MemoryRepository(PostgresStore(mine))
            other_writer = MemoryRepository(PostgresStore(theirs))
            context = Context(user_id=unique("u"))
            repo.add_fact(context, "Lives in Kyoto", key="home")
            with theirs.transaction():
                other_writer.add_fact(context, "Lives in Osaka", key="home")
                # Meanwhile a second write commits and a search warms the cache.
                repo.add_fact(context, "Uses Neovim", key="editor")
                assert contents(repo.search(context, "lives")) == ["Lives in Kyoto"]
            assert contents(repo.search(context, "lives")) == ["Lives in Osaka"]
    finally:
        with psycopg.connect(database_uri, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_change_tracking_counts_every_write_to_a_memory_namespace(
    persistence: Persistence, database_uri: str
) -> None:
    repo = MemoryRepository(persistence.store)
    context = Context(user_id=unique("u"))
    prefix = ".".join(user_facts(context.user_id, context.agent_name))

    def counter() -> int | None:
        with psycopg.connect(database_uri) as connection:
            row = connection.execute(
                "SELECT version FROM ctxgraph_namespace_versions WHERE prefix = %s", (prefix,)
            ).fetchone()
        return None if row is None else int(row[0])

    assert counter() is None
    repo.add_fact(context, "Uses Neovim", key="editor")
    repo.add_fact(context, "Uses Helix", key="editor")
    assert counter() == 2
    # A delete made with plain SQL, not through the repository, counts as well.
    with psycopg.connect(database_uri, autocommit=True) as connection:
        connection.execute("DELETE FROM store WHERE prefix = %s", (prefix,))
    assert counter() == 3
    assert repo.search(context, "helix") == []


def test_a_role_that_cannot_install_tracking_still_gets_fresh_results(
    database_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = unique("limited").replace("-", "_")
    role = f"{name}_role"
    with psycopg.connect(database_uri, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
        admin.execute(f"CREATE ROLE {role} LOGIN")
    owner_uri = make_conninfo(database_uri, dbname=name)
    limited_uri = make_conninfo(database_uri, dbname=name, user=role)
    try:
        with psycopg.connect(owner_uri, autocommit=True) as owner:
            PostgresStore(owner).setup()
            owner.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON store TO {role}")
        with caplog.at_level("WARNING", logger="ctxgraph.memory"):
            assert install_change_tracking(limited_uri) is False
        assert "memory change tracking not installed" in caplog.text
        with (
            psycopg.connect(limited_uri, autocommit=True) as mine,
            psycopg.connect(owner_uri, autocommit=True) as theirs,
        ):
            repo = MemoryRepository(PostgresStore(mine))
            context = Context(user_id=unique("u"))
            repo.add_fact(context, "Uses Neovim", key="editor")
            assert contents(repo.search(context, "neovim")) == ["Uses Neovim"]
            MemoryRepository(PostgresStore(theirs)).add_fact(context, "Uses Helix", key="editor")
            assert contents(repo.search(context, "helix")) == ["Uses Helix"]
    finally:
        with psycopg.connect(database_uri, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.execute(f"DROP ROLE IF EXISTS {role}")


def test_a_burst_of_changes_is_read_back_in_one_pass(persistence: Persistence) -> None:
    # More keys changed since the last search than are worth fetching one by one: the
    # refresh reads the namespace whole and still notices the deleted fact.
    repo = MemoryRepository(persistence.store)
    context = Context(user_id=unique("u"))
    repo.add_fact(context, "Uses Neovim", key="editor")
    assert contents(repo.search(context, "neovim")) == ["Uses Neovim"]
    repo.add_facts(context, [f"Knows language number {i}" for i in range(1_100)])
    assert repo.forget(context, "editor")
    assert repo.search(context, "neovim") == []
    assert contents(repo.search(context, "number 1099", top_k=1)) == ["Knows language number 1099"]
    assert len(repo.list_facts(context)) == 1_100


def test_memory_candidates_refresh_each_namespace_once(
    persistence: Persistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = MemoryRepository(persistence.store)
    context = Context(user_id=unique("u"), project_id=unique("p"))
    repo.add_fact(context, "Prefers tea", key="drink", confidence=0.95)
    repo.add_fact(context, "Was wrong about the port", key="port", category="correction")
    repo.add_fact(context, "Deploys with Helm", key="deploy", scope="project")
    refreshed: list[tuple[str, ...]] = []
    original = fact_index_cache._fresh

    def counting(store: BaseStore, namespace: tuple[str, ...]) -> Any:
        refreshed.append(namespace)
        return original(store, namespace)

    monkeypatch.setattr(fact_index_cache, "_fresh", counting)
    found = repo.memory_candidates(context, "helm tea")
    assert sorted(refreshed) == sorted(
        [user_facts(context.user_id, "default"), project_facts(str(context.project_id))]
    )
    assert {(f.scope, f.key) for f in found} == {
        ("user", "drink"),
        ("user", "port"),
        ("project", "deploy"),
    }


def test_the_confidence_order_stays_sorted_through_small_and_large_changes() -> None:
    from ctxgraph.store.search.index import Changes, _Namespace

    def value(confidence: float, day: int, correction: bool = False) -> dict[str, object]:
        created = datetime(2025, 1, day, tzinfo=UTC).isoformat()
        category = "correction" if correction else "context"
        return {
            "content": f"fact {confidence} {day}",
            "confidence": confidence,
            "created_at": created,
            "category": category,
        }

    space = _Namespace()
    bulk = [
        (f"k{i}", f"s{i}", value(0.5 + (i % 5) / 10, 1 + i % 28, i % 7 == 0)) for i in range(300)
    ]
    space.apply(Changes(1, bulk, []))  # more than the in-place limit: sorted once
    space.apply(
        Changes(2, [("k3", "s3b", value(0.99, 2)), ("new", "n", value(0.95, 3, True))], ["k10"])
    )

    def expected(only_corrections: bool) -> list[str]:
        docs = {
            k: d.value
            for k, d in space.docs.items()
            if not only_corrections or d.value["category"] == "correction"
        }

        def rank(key: str) -> tuple[float, float, str]:
            created = datetime.fromisoformat(str(docs[key]["created_at"]))
            return (-float(docs[key]["confidence"]), -created.timestamp(), key)  # type: ignore[arg-type]

        # Most confident first, then newest, then by key.
        return sorted(docs, key=rank)

    assert space.ranked.first(400) == expected(False)
    assert space.ranked.first(2) == ["k3", "new"]
    assert space.corrections.first(400) == expected(True)
    assert "k10" not in space.ranked.first(400)
