"""ctxgraph inside a parent graph through ``as_subgraph``: its state persists per thread."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import SubgraphSetupError, as_subgraph, build_graph
from ctxgraph.graph.subgraph import parent_update, unseen
from ctxgraph.nodes.compaction.node import CompactionError
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.state.messages import is_real_user_message
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.persistence.archive import (
    ThreadArchive,
    averify_thread,
    record_messages,
    verify_thread,
    version_key,
)
from ctxgraph.store.persistence.connection import Persistence, open_async_persistence

NODE = "assistant"
SETTINGS = Settings(trigger_messages=12, keep_messages=4)
PARENT_BOUND = SETTINGS.trigger_messages + 4
"""The parent's messages equal the child's window: under the trigger plus one turn's growth."""
RULES = "Rules the parent's run context sets."

Parent = CompiledStateGraph[Any, Any, Any, Any]


def parent_graph(node: Any, **compile_kwargs: Any) -> Parent:
    """``START -> assistant -> END`` on ``MessagesState``, the child as ``assistant``."""
    builder = StateGraph(MessagesState, context_schema=Context)
    builder.add_node(NODE, node)
    builder.add_edge(START, NODE)
    builder.add_edge(NODE, END)
    return builder.compile(**compile_kwargs)


def config_for(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def child_config(thread_id: str) -> RunnableConfig:
    """The config that addresses the child's state: the parent's thread, the node's namespace."""
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": NODE}}


def question(turn: int) -> str:
    """Even turns use the calculator (four messages), odd turns are plain notes (two).

    Each carries a filler long enough that a fold saves more than the read_history schema
    the first compaction binds.
    """
    if turn % 2 == 0:
        return f"What is {turn} * 7? Keep order B-{3000 + turn} in mind.{FILLER}"
    return f"Note {turn}: the crate for order B-{3000 + turn} is blue.{FILLER}"


FILLER = " The carrier confirmed the pickup window and the customs papers were filed." * 4


def ids(messages: Sequence[BaseMessage]) -> list[str | None]:
    return [m.id for m in messages]


def archived_and_window(
    records: Sequence[Any], window: Sequence[BaseMessage]
) -> tuple[list[BaseMessage], list[BaseMessage]]:
    archived = [m for record in records for m in record_messages(record)]
    return archived, list(window)


def assert_every_user_message_once(
    asked: Sequence[str], archived: Sequence[BaseMessage], window: Sequence[BaseMessage]
) -> None:
    every = [*archived, *window]
    message_ids = [m.id for m in every]
    assert len(message_ids) == len(set(message_ids)), "a message is archived or kept twice"
    said = Counter(m.text for m in every if is_real_user_message(m))
    assert said == Counter(asked), said


def test_fifty_parent_turns_on_postgres(persistence: Persistence, thread_id: str) -> None:
    parent = parent_graph(
        as_subgraph(models=demo_models(), tools=demo_tools(), settings=SETTINGS),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )
    config = config_for(thread_id)
    context = Context(user_id="sub-user")
    asked: list[str] = []
    sizes: list[int] = []
    versions: list[int] = []
    for turn in range(50):
        asked.append(question(turn))
        before = set(ids(parent.get_state(config).values.get("messages", [])))
        result: dict[str, Any] = {}
        for mode, payload in parent.stream(
            {"messages": [HumanMessage(asked[-1])]},
            config,
            context=context,
            stream_mode=["updates", "values"],
        ):
            if mode == "values":
                result = payload
            else:
                # Removals of folded messages, then only this turn's new messages.
                update = payload[NODE]["messages"]
                removed = [m for m in update if isinstance(m, RemoveMessage)]
                assert {m.id for m in removed} <= before
                assert all(m.id not in before for m in update if m not in removed), turn
        child = parent.get_state(child_config(thread_id)).values
        # The parent holds exactly the child's window: nothing folded, nothing twice.
        assert ids(result["messages"]) == ids(child["messages"]), turn
        assert ids(parent.get_state(config).values["messages"]) == ids(child["messages"])
        answer = result["messages"][-1]
        assert isinstance(answer, AIMessage) and not answer.tool_calls
        if turn % 2 == 0:
            assert answer.text == f"The calculator says {turn * 7}.", answer.text
        sizes.append(len(result["messages"]))
        versions.append(int((child.get("compaction") or {}).get("version", 0)))

    child = parent.get_state(child_config(thread_id)).values
    mark = child["compaction"]
    # The mark advanced turn after turn, so no version was ever written twice.
    assert versions == sorted(versions)
    assert mark["version"] >= 5, versions
    assert child["summary"]["schema_version"]
    items = persistence.store.search(("threads", thread_id, "archive"), limit=1000)
    keys = sorted(item.key for item in items)
    assert keys == [version_key(v) for v in range(1, mark["version"] + 1)]
    report = verify_thread(persistence.store, thread_id, mark)
    assert report.ok, report.reason
    assert report.versions_checked == mark["version"]

    records = ThreadArchive(persistence.store, thread_id).records()
    archived, window = archived_and_window(records, child["messages"])
    assert_every_user_message_once(asked, archived, window)
    # Bounded: the parent never holds more than the child's window.
    assert max(sizes) <= PARENT_BOUND, sizes
    assert len(archived) > 100


async def test_parent_turns_async_on_postgres(database_uri: str, thread_id: str) -> None:
    config = config_for(thread_id)
    context = Context(user_id="sub-user")
    asked = [question(turn) for turn in range(8)]
    async with open_async_persistence(database_uri) as persistence:
        parent = parent_graph(
            as_subgraph(models=demo_models(), tools=demo_tools(), settings=SETTINGS),
            checkpointer=persistence.checkpointer,
            store=persistence.store,
        )
        for text in asked:
            result = await parent.ainvoke(
                {"messages": [HumanMessage(text)]}, config, context=context
            )
            child = (await parent.aget_state(child_config(thread_id))).values
            assert ids(result["messages"]) == ids(child["messages"])
            assert len(result["messages"]) <= PARENT_BOUND
        mark = child["compaction"]
        report = await averify_thread(persistence.store, thread_id, mark)
        records = await ThreadArchive(persistence.store, thread_id).arecords()

    assert mark["version"] >= 2
    assert report.ok, report.reason
    assert [r["version"] for r in records] == list(range(1, mark["version"] + 1))
    archived, window = archived_and_window(records, child["messages"])
    assert_every_user_message_once(asked, archived, window)


def test_parent_context_reaches_the_child_and_parent_messages_map_in_once() -> None:
    """A message another parent node adds reaches the child once, on the next turn."""
    models = demo_models()
    assert isinstance(models.main, ScriptedChatModel)
    builder = StateGraph(MessagesState, context_schema=Context)
    builder.add_node(NODE, as_subgraph(models=models, tools=demo_tools()))
    builder.add_node("remark", lambda _: {"messages": [AIMessage("A remark from the parent.")]})
    builder.add_edge(START, NODE)
    builder.add_edge(NODE, "remark")
    builder.add_edge("remark", END)
    parent = builder.compile(checkpointer=InMemorySaver(), store=InMemoryStore())
    config = config_for(f"p-{uuid.uuid4().hex[:8]}")
    context = Context(user_id="u", settings=Settings(system_prompt=RULES))

    parent.invoke({"messages": [HumanMessage("What is 17 * 23?")]}, config, context=context)
    updates = list(
        parent.stream(
            {"messages": [HumanMessage("Thanks.")]}, config, context=context, stream_mode="updates"
        )
    )
    second = parent.get_state(config).values

    request = models.main.requests[-1]
    assert request[0].text == RULES
    assert [m.text for m in request[1:]] == [
        "What is 17 * 23?",
        "",
        "391",
        "The calculator says 391.",
        "A remark from the parent.",
        "Thanks.",
    ]
    child = parent.get_state(child_config(config["configurable"]["thread_id"])).values
    # The child has the first remark; the second one is new to it, after its answer.
    assert ids(second["messages"][:-1]) == ids(child["messages"])
    assert second["messages"][-1].text == "A remark from the parent."
    # Only what is new to the parent comes back: the child's answer, nothing resent.
    (answer,) = updates[0][NODE]["messages"]
    assert answer.id == second["messages"][-2].id


def test_a_turn_with_nothing_new_does_not_run_the_child() -> None:
    models = demo_models()
    assert isinstance(models.main, ScriptedChatModel)
    parent = parent_graph(
        as_subgraph(models=models, tools=demo_tools()),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    config = config_for("idle")
    first = parent.invoke(
        {"messages": [HumanMessage("Hello.")]}, config, context=Context(user_id="u")
    )
    calls = models.main.calls
    again = parent.invoke({"messages": []}, config, context=Context(user_id="u"))
    assert models.main.calls == calls
    assert ids(again["messages"]) == ids(first["messages"])


def test_a_failed_turn_resumes_in_the_child() -> None:
    """Retrying the parent after a failed step finishes the child's run, with no duplicate."""
    model = ScriptedChatModel(script=[RuntimeError("model endpoint down"), "Recovered."])
    parent = parent_graph(
        as_subgraph(models=Models(main=model), settings=Settings(memory_extraction="off")),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    config = config_for("retry")
    with pytest.raises(RuntimeError, match="model endpoint down"):
        parent.invoke({"messages": [HumanMessage("Hi.")]}, config, context=Context(user_id="u"))

    result = parent.invoke(None, config, context=Context(user_id="u"))

    assert [m.text for m in result["messages"]] == ["Hi.", "Recovered."]
    child = parent.get_state(child_config("retry")).values
    assert ids(result["messages"]) == ids(child["messages"])
    assert [[m.text for m in request] for request in model.requests][-1][-1] == "Hi."


def test_parent_without_a_store_fails_on_its_first_run() -> None:
    model = ScriptedChatModel(script=["never"])
    parent = parent_graph(as_subgraph(models=Models(main=model)), checkpointer=InMemorySaver())
    with pytest.raises(SubgraphSetupError, match=r"compile the parent with one.*store=\.\.\."):
        parent.invoke({"messages": [("user", "hi")]}, config_for("s"), context=Context(user_id="u"))
    assert model.calls == 0


def test_parent_without_a_checkpointer_fails_on_its_first_run() -> None:
    model = ScriptedChatModel(script=["never"])
    parent = parent_graph(as_subgraph(models=Models(main=model)), store=InMemoryStore())
    with pytest.raises(SubgraphSetupError, match=r"parent\.compile\(checkpointer=\.\.\."):
        parent.invoke({"messages": [("user", "hi")]}, config_for("c"), context=Context(user_id="u"))
    assert model.calls == 0


def test_a_plain_child_without_a_store_names_the_fix_at_compaction() -> None:
    """``build_graph()`` added as a node has no state of its own; without a Store it says so."""
    parent = parent_graph(
        build_graph(models=demo_models(), tools=demo_tools(), settings=SETTINGS),
        checkpointer=InMemorySaver(),
    )
    config = config_for("plain")
    with pytest.raises(CompactionError, match=r"as_subgraph\(\.\.\.\) and compile the parent"):
        for turn in range(10):
            parent.invoke(
                {"messages": [HumanMessage(question(2 * turn))]},
                config,
                context=Context(user_id="u"),
            )


def test_mapping_helpers() -> None:
    a, b, c, d = (HumanMessage(t, id=t) for t in "abcd")
    # In: after the last message the child holds; everything when it holds none.
    assert unseen([a, b, c, d], [b]) == [c, d]
    assert unseen([a, b], []) == [a, b]
    assert unseen([a, b], [a, b]) == []
    # Out: remove what the window dropped, add what the parent lacks or holds changed.
    changed = HumanMessage("b, offloaded", id="b")
    update = parent_update([a, b, c], [changed, c, d])
    assert [(type(m).__name__, m.id) for m in update] == [
        ("RemoveMessage", "a"),
        ("HumanMessage", "b"),
        ("HumanMessage", "d"),
    ]
