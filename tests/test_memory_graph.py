"""Long-term memory through the graph: end of turn, flush, deferred, and the rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph, wait_for_memory
from ctxgraph.graph.demo import demo_reply
from ctxgraph.nodes.memory.extract import MEMORY_TAGS, MemoryExtractor
from ctxgraph.nodes.memory.worker import process_pending
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_memory, demo_tools
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.queue import MemoryQueue
from ctxgraph.store.memory.repository import MemoryRepository

Responder = Callable[[list[BaseMessage]], AIMessage]


def memory_model(responder: Responder | None = None) -> ScriptedChatModel:
    """A memory model that extracts "I mainly/prefer ..." sentences (or answers as told)."""
    return ScriptedChatModel(
        responder=responder or (lambda messages: demo_memory(str(messages[-1].content)))
    )


def make_graph(memory: ScriptedChatModel, **settings: Any) -> tuple[Any, InMemoryStore]:
    # Inline: these tests assert what a turn stored by the time invoke returns.
    settings.setdefault("memory_extraction", "inline")
    store = InMemoryStore()
    models = Models(main=ScriptedChatModel(responder=demo_reply), memory=memory)
    graph = build_graph(
        models=models,
        tools=demo_tools(),
        settings=Settings(**settings),
        checkpointer=InMemorySaver(),
        store=store,
    )
    return graph, store


def config(thread: str) -> dict[str, dict[str, str]]:
    return {"configurable": {"thread_id": thread}}


def update_call(facts: list[dict[str, Any]]) -> AIMessage:
    args = {"facts": facts, "profile_updates": []}
    return AIMessage(content="", tool_calls=[{"name": "MemoryUpdate", "args": args, "id": "m1"}])


def test_end_of_turn_extraction_stores_a_user_fact_without_streaming_it() -> None:
    memory = memory_model()
    graph, store = make_graph(memory)
    ctx = Context(user_id="alice")
    message = HumanMessage("I mainly do Python backend work. Hello there.", id="h-alice-1")
    chunks = list(
        graph.stream({"messages": [message]}, config("t1"), context=ctx, stream_mode="messages")
    )

    facts = MemoryRepository(store).list_facts(ctx)
    assert [f.content for f in facts] == ["I mainly do Python backend work."]
    assert facts[0].source_thread == "t1"
    # The memory model saw the user's row by id, and none of its tokens streamed.
    prompt = str(memory.requests[0][-1].content)
    assert "[h-alice-1] user: I mainly do Python backend work. Hello there." in prompt
    assert all(meta.get("langgraph_node") != "extract_memory" for _, meta in chunks)
    assert not [m for _, m in chunks if set(MEMORY_TAGS) & set(m.get("tags") or [])]
    # Another user and another agent name see nothing.
    assert MemoryRepository(store).list_facts(Context(user_id="bob")) == []
    assert MemoryRepository(store).list_facts(Context(user_id="alice", agent_name="x")) == []


def test_an_authorization_is_never_stored_whatever_the_model_says() -> None:
    statement = "From now on you may delete old files without asking."

    def labels(messages: list[BaseMessage]) -> AIMessage:
        row = str(messages[-1].content).split("[", 2)[-1].split("]")[0]
        base = {
            "key": "may_delete_files",
            "content": statement,
            "category": "preference",
            "confidence": 0.95,
            "evidence_message_id": row,
            "evidence_text": statement,
        }
        return update_call(
            [
                {**base, "scope": "user", "durability": "durable", "authority": "transactional"},
                {**base, "scope": "thread", "durability": "temporary", "authority": "descriptive"},
            ]
        )

    memory = memory_model(labels)
    graph, store = make_graph(memory)
    ctx = Context(user_id="alice")
    graph.invoke({"messages": [("user", statement)]}, config("t2"), context=ctx)
    assert memory.calls == 1
    assert MemoryRepository(store).list_facts(ctx) == []


def test_a_greeting_only_turn_makes_no_memory_call() -> None:
    memory = memory_model()
    graph, _ = make_graph(memory)
    graph.invoke(
        {"messages": [("user", "好的，谢谢！")]}, config("t3"), context=Context(user_id="a")
    )
    assert memory.calls == 0


def test_flush_and_end_of_turn_store_a_statement_once() -> None:
    memory = memory_model()
    graph, store = make_graph(memory, trigger_messages=6, keep_messages=2)
    ctx = Context(user_id="carol")
    # Long enough turns that folding them clearly shrinks the request, even with the
    # read_history schema the first compaction binds.
    filler = " Please keep the quarterly report, the budget sheet and the travel plan in mind." * 8
    turns = [
        "I prefer short answers." + filler,
        "What is 2 * 3?" + filler,
        "What is 4 * 5?" + filler,
        "What is 6 * 7?" + filler,
    ]
    for text in turns:
        graph.invoke({"messages": [("user", text)]}, config("t4"), context=ctx)

    state = graph.get_state(config("t4")).values
    assert state["compaction"]["version"] >= 1  # a flush happened before compaction
    seen: list[str] = []
    for request in memory.requests:
        seen.extend(line for line in str(request[-1].content).splitlines() if "] user: " in line)
    # Every user message reached the memory model exactly once, across both paths.
    assert sorted(line.split("] user: ")[1] for line in seen) == sorted(turns)
    facts = MemoryRepository(store).list_facts(ctx)
    assert [f.content for f in facts] == ["I prefer short answers."]


def test_project_facts_need_a_project_and_are_shared_within_it() -> None:
    sentence = "This repo uses PostgreSQL."

    def project(messages: list[BaseMessage]) -> AIMessage:
        row = str(messages[-1].content).split("<new_conversation>\n[", 1)[1].split("]")[0]
        fact = {
            "key": "database",
            "content": sentence,
            "category": "context",
            "scope": "project",
            "durability": "durable",
            "authority": "descriptive",
            "confidence": 0.9,
            "evidence_message_id": row,
            "evidence_text": sentence,
        }
        return update_call([fact])

    graph, store = make_graph(memory_model(project))
    repo = MemoryRepository(store)
    graph.invoke({"messages": [("user", sentence)]}, config("t5"), context=Context(user_id="a"))
    assert repo.list_facts(Context(user_id="a")) == []
    in_project = Context(user_id="a", project_id="shop")
    graph.invoke({"messages": [("user", sentence)]}, config("t6"), context=in_project)
    teammate = Context(user_id="b", project_id="shop")
    assert [f.content for f in repo.list_facts(teammate)] == [sentence]
    assert repo.list_facts(Context(user_id="b")) == []


def test_deferred_extraction_queues_then_the_worker_stores() -> None:
    memory = memory_model()
    graph, store = make_graph(memory, memory_extraction="deferred")
    ctx = Context(user_id="dave")
    graph.invoke({"messages": [("user", "I mainly work on payments.")]}, config("t7"), context=ctx)
    graph.invoke({"messages": [("user", "I prefer tables.")]}, config("t7"), context=ctx)
    assert memory.calls == 0  # nothing on the hot path
    queued = MemoryQueue(store).due(quiet_seconds=0)
    assert len(queued) == 1  # one item per thread, newest rows merged in
    assert [r["content"] for r in queued[0].rows if r["role"] == "user"] == [
        "I mainly work on payments.",
        "I prefer tables.",
    ]
    process_pending(store, MemoryExtractor(memory), threshold=0.7, quiet_seconds=0)
    assert memory.calls == 1
    contents = sorted(f.content for f in MemoryRepository(store).list_facts(ctx))
    assert contents == ["I mainly work on payments.", "I prefer tables."]
    assert MemoryQueue(store).due(quiet_seconds=0) == []


async def test_async_turn_extracts_too() -> None:
    graph, store = make_graph(memory_model())
    ctx = Context(user_id="erin")
    await graph.ainvoke(
        {"messages": [("user", "I usually deploy on Fridays.")]}, config("t8"), context=ctx
    )
    facts = await MemoryRepository(store).alist_facts(ctx)
    assert [f.content for f in facts] == ["I usually deploy on Fridays."]


def test_the_offline_demo_model_extracts_memory() -> None:
    store = InMemoryStore()
    graph = build_graph(
        models=demo_models(), tools=demo_tools(), checkpointer=InMemorySaver(), store=store
    )
    ctx = Context(user_id="frank")
    graph.invoke(
        {"messages": [("user", "I prefer tea. What is 1 + 1?")]}, config("t9"), context=ctx
    )
    assert wait_for_memory(30) == 0  # the default extracts in the background
    facts = MemoryRepository(store).list_facts(ctx)
    assert [(f.content, f.category) for f in facts] == [("I prefer tea.", "preference")]


def test_memory_off_at_build_time_removes_the_memory_nodes() -> None:
    memory = memory_model()
    graph, store = make_graph(memory, memory_extraction="off")
    assert "flush" not in graph.nodes and "extract_memory" not in graph.nodes
    ctx = Context(user_id="gina")
    graph.invoke({"messages": [("user", "I prefer tea.")]}, config("t10"), context=ctx)
    assert memory.calls == 0
    assert MemoryRepository(store).list_facts(ctx) == []
