"""One ``Ranker`` everywhere: the view, ``memory_search``, the CLI and the repository agree.

A ranker that orders facts by their text (not today's ``final_score`` order) gives the
same order in the ``load_memory`` view, the ``memory_search`` tool's output,
``ctxgraph memory search --ranker`` and ``MemoryRepository.search``; without one, every
reader keeps today's ranking exactly.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph import MemoryPart
from ctxgraph.graph import build_graph
from ctxgraph.nodes.memory.extract import EXTRACTION_FACTS
from ctxgraph.nodes.memory.render import FACTS_HEADING
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.messages import ORIGIN_KEY
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.ranking import Ranker, rank, scored_candidates
from ctxgraph.store.memory.repository import MemoryRepository, RepositoryFactory
from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import run_ctxgraph
from tests.support.rankers import by_confidence, by_content, reverse

QUERY = "rust compiler borrow checker"

FACTS = (
    # key, content, age in days, confidence
    ("daily", "Works on the rust compiler borrow checker every day", 400, 0.8),
    ("learning", "Is learning rust compiler internals", 5, 0.8),
    ("likes", "Likes rust", 2, 0.95),
    ("boards", "Collects antique checker boards", 200, 0.99),
    ("crates", "Publishes rust crates", 60, 0.7),
)
CONTENTS = [content for _, content, _, _ in FACTS]


def _seed(store: Any, context: Context) -> None:
    repo = MemoryRepository(store)
    now = datetime.now(UTC)
    for key, content, age, confidence in FACTS:
        repo.add_fact(
            context, content, key=key, confidence=confidence, created_at=now - timedelta(days=age)
        )


def _view_contents(request: list[BaseMessage]) -> list[str]:
    view = next(m for m in request if m.additional_kwargs.get(ORIGIN_KEY) == "memory")
    lines = str(view.content).splitlines()
    rows = lines[lines.index(FACTS_HEADING) + 1 :]
    return [
        next(c for c in CONTENTS if c in row) for row in rows if any(c in row for c in CONTENTS)
    ]


def test_a_ranker_orders_the_view_the_tool_the_cli_and_the_repository_alike(
    persistence: Persistence, python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    user = f"u-{uuid.uuid4().hex[:10]}"
    context = Context(user_id=user)
    _seed(persistence.store, context)

    default = [f.content for f in MemoryRepository(persistence.store).search(context, QUERY)]
    repository = [
        f.content
        for f in MemoryRepository(persistence.store, ranker=by_content).search(context, QUERY)
    ]
    assert repository == sorted(CONTENTS)
    assert repository != default  # the ranker really changes the order

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
        parts=[MemoryPart(ranker=by_content)],
    )
    result = graph.invoke(
        {"messages": [("user", QUERY)]}, {"configurable": {"thread_id": thread_id}}, context=context
    )
    message = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    tool = [row["content"] for row in json.loads(str(message.content))]
    view = _view_contents(main.requests[0])

    spec = "tests.support.rankers:by_content"
    cli = run_ctxgraph(
        python, subprocess_env, "memory", "search", "--user", user, QUERY, "--ranker", spec
    )
    assert cli.returncode == 0, cli.stderr
    printed = [next(c for c in CONTENTS if c in line) for line in cli.stdout.splitlines()]

    assert tool == repository
    assert view == repository
    assert printed == repository


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("by_content", "--ranker must be module:attribute"),
        ("tests.support.no_such_module:rank", "cannot import 'tests.support.no_such_module'"),
        ("tests.support.rankers:missing", "has no attribute 'missing'"),
        ("tests.support.rankers:NOT_A_RANKER", "NOT_A_RANKER is a int, not a ranker"),
    ],
)
def test_a_ranker_option_that_names_no_ranker_is_a_one_line_user_error(
    python: str, subprocess_env: dict[str, str], spec: str, message: str
) -> None:
    cli = run_ctxgraph(
        python, subprocess_env, "memory", "search", "--user", "u1", QUERY, "--ranker", spec
    )
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert message in cli.stderr
    assert "Traceback" not in cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1


def test_without_a_ranker_every_reader_keeps_todays_ranking() -> None:
    store = InMemoryStore()
    context = Context(user_id="u-default")
    _seed(store, context)
    plain = MemoryRepository(store)
    explicit = MemoryRepository(store, ranker=rank)
    assert plain.ranker is rank
    assert plain.search(context, QUERY) == explicit.search(context, QUERY)
    assert plain.memory_candidates(context, QUERY) == explicit.memory_candidates(context, QUERY)
    # scored_candidates is the whole pool in rank's order, rank its first top_k.
    sources, _ = plain._sources(context, QUERY, 128)
    assert scored_candidates(sources, None, "created")[:3] == rank(sources, 3, None, "created")


async def test_async_readers_use_the_ranker_and_it_gets_the_query() -> None:
    store = InMemoryStore()
    context = Context(user_id="u-async")
    _seed(store, context)
    by_confidence.queries.clear()
    repo = RepositoryFactory(ranker=by_confidence)(store)
    found = [f.confidence for f in await repo.asearch(context, QUERY)]
    assert found == sorted(found, reverse=True)
    offered = await repo.amemory_candidates(context, QUERY)
    assert [f.content for f in offered] == [f.content for f in repo.search(context, QUERY)]
    assert set(by_confidence.queries) == {QUERY}


def test_the_reverse_ranker_reverses_the_view_of_a_graph() -> None:
    store = InMemoryStore()
    context = Context(user_id="u-reverse")
    _seed(store, context)
    today = [f.content for f in MemoryRepository(store).search(context, QUERY)]
    main = ScriptedChatModel(script=["done"])
    graph = build_graph(
        models=Models(main=main),
        settings=Settings(memory_extraction="off"),
        checkpointer=InMemorySaver(),
        store=store,
        parts=[MemoryPart(ranker=reverse)],
    )
    graph.invoke(
        {"messages": [("user", QUERY)]}, {"configurable": {"thread_id": "r"}}, context=context
    )
    assert _view_contents(main.requests[0]) == list(reversed(today))


def test_a_ranker_is_checked_when_the_graph_is_built_and_when_it_answers() -> None:
    assert isinstance(by_content, Ranker)
    with pytest.raises(TypeError, match="ranker must be a callable"):
        build_graph(
            models=Models(main=ScriptedChatModel(script=[])),
            parts=[MemoryPart(ranker=42)],  # type: ignore[arg-type]
        )

    def broken(*args: Any, **kwargs: Any) -> Any:
        return ["not a fact"]

    store = InMemoryStore()
    context = Context(user_id="u-broken")
    _seed(store, context)
    with pytest.raises(TypeError, match="must return a list of Fact records"):
        MemoryRepository(store, ranker=broken).search(context, QUERY)


def test_the_ranker_orders_the_stored_facts_the_memory_model_is_shown() -> None:
    """Extraction ranks the related stored facts through the graph's ranker too."""
    store = InMemoryStore()
    context = Context(user_id="ranked-extraction")
    _seed(store, context)
    # More than a prompt shows (EXTRACTION_FACTS): the prompt ranks the related ones.
    filler = MemoryRepository(store)
    for n in range(20):
        filler.add_fact(context, f"Keeps tea tin number {n} on shelf {n % 4}", confidence=0.6)
    memory = ScriptedChatModel(script=[AIMessage("nothing new")] * 4)
    graph = build_graph(
        models=Models(main=ScriptedChatModel(script=["ok"] * 4), memory=memory),
        checkpointer=InMemorySaver(),
        store=store,
        settings=Settings(memory_extraction="inline"),
        parts=[MemoryPart(ranker=by_content)],
    )
    text = f"I always work on the {QUERY}."
    graph.invoke(
        {"messages": [("user", text)]}, {"configurable": {"thread_id": "r"}}, context=context
    )

    def order(repository: MemoryRepository) -> list[str]:
        shown = repository.memory_candidates(context, text)[:EXTRACTION_FACTS]
        return [f.content for f in shown if f.content in CONTENTS]

    prompt = "\n".join(str(m.content) for m in memory.requests[0])
    shown = sorted((c for c in CONTENTS if c in prompt), key=prompt.find)
    ranked = order(MemoryRepository(store, ranker=by_content))
    assert shown == ranked
    assert ranked != order(MemoryRepository(store))  # the ranker really changes the order
