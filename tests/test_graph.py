"""The graph's topology, the exact requests the model receives, and configuration errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph, compile_graph, create_builder
from ctxgraph.nodes.model import RequestTooLargeError
from ctxgraph.nodes.routing import route_after_model
from ctxgraph.state import Context, Models, Settings, SettingsError
from ctxgraph.state.context import ContextError
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.state.scripted_model import ScriptedChatModel, ScriptExhaustedError

SNAPSHOT = Path(__file__).parent / "snapshots" / "graph.mmd"


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order's shipping status."""
    if order_id == "BROKEN":
        raise RuntimeError("order service unavailable")
    return f"order {order_id}: shipped"


def call(name: str, args: dict[str, str], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def config(thread: str = "t") -> dict[str, dict[str, str]]:
    return {"configurable": {"thread_id": thread}}


def test_topology_matches_snapshot() -> None:
    drawn = build_graph(models=demo_models(), tools=demo_tools()).get_graph().draw_mermaid()
    assert drawn == SNAPSHOT.read_text(encoding="utf-8")


def test_builder_is_uncompiled_and_compiles_with_callers_persistence() -> None:
    builder = create_builder(models=demo_models(), tools=demo_tools())
    assert set(builder.nodes) == {
        "load_memory",
        "flush",
        "compact",
        "model",
        "tools",
        "invalid_calls",
        "extract_memory",
    }
    saver = InMemorySaver()
    compiled = builder.compile(checkpointer=saver)
    compiled.invoke({"messages": [("user", "hi")]}, config(), context=Context(user_id="u"))
    assert saver.get_tuple(config()) is not None


def test_model_receives_system_prompt_then_window() -> None:
    model = ScriptedChatModel(script=["first answer", "second answer"])
    graph = build_graph(
        models=Models(main=model),
        settings=Settings(system_prompt="Be brief.", memory_extraction="off"),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    ctx = Context(user_id="u1")
    graph.invoke({"messages": [HumanMessage("one", id="h1")]}, config(), context=ctx)
    graph.invoke({"messages": [HumanMessage("two", id="h2")]}, config(), context=ctx)
    second = model.requests[1]
    assert [type(m) for m in second] == [SystemMessage, HumanMessage, AIMessage, HumanMessage]
    assert [m.content for m in second] == ["Be brief.", "one", "first answer", "two"]
    state = graph.get_state(config()).values
    assert not any(isinstance(m, SystemMessage) for m in state["messages"])


def test_context_settings_override_build_settings() -> None:
    model = ScriptedChatModel(script=["ok"])
    graph = build_graph(models=Models(main=model), settings=Settings(system_prompt="graph"))
    ctx = Context(user_id="u1", settings={"system_prompt": "run"})  # as a server sends it
    graph.invoke({"messages": [("user", "hi")]}, context=ctx)
    assert model.requests[0][0].content == "run"


def test_tool_call_round_trip_and_bound_schemas() -> None:
    model = ScriptedChatModel(script=[call("lookup_order", {"order_id": "A-7"}, "c1"), "done"])
    graph = build_graph(models=Models(main=model), tools=[lookup_order])
    result = graph.invoke({"messages": [("user", "where is A-7?")]}, context=Context(user_id="u"))
    tool_message = result["messages"][2]
    assert isinstance(tool_message, ToolMessage)
    assert tool_message.tool_call_id == "c1"
    assert tool_message.content == "order A-7: shipped"
    assert result["messages"][-1].content == "done"
    # A fresh thread in memory mode auto binds no built-in tool (tests/test_bound_tools.py).
    for tools in model.tool_requests:
        assert [t["function"]["name"] for t in tools] == ["lookup_order"]
    assert model.requests[1][-1] == tool_message


def test_tool_failure_returns_error_to_model() -> None:
    model = ScriptedChatModel(
        script=[call("lookup_order", {"order_id": "BROKEN"}, "c9"), "sorry, it failed"]
    )
    graph = build_graph(models=Models(main=model), tools=[lookup_order])
    result = graph.invoke({"messages": [("user", "check BROKEN")]}, context=Context(user_id="u"))
    error = result["messages"][2]
    assert isinstance(error, ToolMessage)
    assert error.status == "error"
    assert "order service unavailable" in str(error.content)
    assert model.requests[1][-1].status == "error"


async def test_async_path_matches_sync() -> None:
    model = ScriptedChatModel(script=[call("lookup_order", {"order_id": "B-2"}, "c2"), "async ok"])
    graph = build_graph(models=Models(main=model), tools=[lookup_order])
    result = await graph.ainvoke(
        {"messages": [("user", "where is B-2?")]}, context=Context(user_id="u")
    )
    assert [m.type for m in result["messages"]] == ["human", "ai", "tool", "ai"]
    assert result["messages"][-1].content == "async ok"


def test_request_over_the_input_window_is_refused_before_the_call() -> None:
    model = ScriptedChatModel(script=["never"])
    # The system prompt is never offloaded (a long user message would be), and no tool
    # schema is bound yet to push the request over.
    settings = Settings(context_window=256, system_prompt="word " * 400)
    graph = build_graph(models=Models(main=model), settings=settings)
    with pytest.raises(RequestTooLargeError, match=r"over the main model's input window of 256"):
        graph.invoke({"messages": [("user", "hi")]}, context=Context(user_id="u"))
    assert model.calls == 0


def test_reported_window_wins_over_setting() -> None:
    model = ScriptedChatModel(script=["fits"])
    model.profile = {"max_input_tokens": 100_000}
    graph = build_graph(models=Models(main=model), settings=Settings(context_window=256))
    result = graph.invoke({"messages": [("user", "word " * 400)]}, context=Context(user_id="u"))
    assert result["messages"][-1].content == "fits"


def test_scripted_model_says_when_script_runs_out() -> None:
    graph = build_graph(models=Models(main=ScriptedChatModel(script=[])))
    with pytest.raises(ScriptExhaustedError, match="no reply for call 1"):
        graph.invoke({"messages": [("user", "hi")]}, context=Context(user_id="u"))


def test_a_checkpointer_without_a_store_is_refused_at_build_time() -> None:
    """Nothing but store= can give a graph with its own checkpointer a Store."""
    with pytest.raises(ValueError, match=r"InMemorySaver\) was given without store=") as error:
        build_graph(models=demo_models(), tools=demo_tools(), checkpointer=InMemorySaver())
    assert "as_subgraph" in str(error.value)
    builder = create_builder(models=demo_models(), tools=demo_tools())
    with pytest.raises(ValueError, match="without store="):
        compile_graph(builder, checkpointer=InMemorySaver())
    # Neither: a LangGraph server or a parent graph supplies both at run time.
    assert build_graph(models=demo_models(), tools=demo_tools()).checkpointer is None


def test_router_rejects_unexpected_state() -> None:
    assert route_after_model({"messages": [AIMessage("x")]}) == "finish"
    assert route_after_model({"messages": [call("t", {}, "c")]}) == "tools"
    invalid = AIMessage(
        "",
        invalid_tool_calls=[
            {"name": "t", "args": "{", "id": "c", "error": None, "type": "invalid_tool_call"}
        ],
    )
    assert route_after_model({"messages": [invalid]}) == "invalid_calls"
    with pytest.raises(ValueError, match="HumanMessage"):
        route_after_model({"messages": [HumanMessage("x")]})
    with pytest.raises(ValueError, match="no messages"):
        route_after_model({"messages": []})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context_window": 10}, "context_window must be an integer of at least 256"),
        ({"context_window": True}, "context_window"),
        ({"system_prompt": "  "}, "system_prompt must be a non-empty string"),
        ({"keep_messages": 0}, r"keep_messages must be a whole number of at least 1"),
        ({"keep_messages": 8, "trigger_messages": 9}, r"trigger_messages .* at least 10"),
        ({"trigger_tokens": 100}, r"trigger_tokens must be a whole number of at least 500"),
        ({"trigger_fraction": 0}, r"trigger_fraction must be a number in \(0, 1\]"),
        ({"trigger_fraction": 1.5}, r"trigger_fraction"),
        ({"summary_max_tokens": 20_000}, r"summary_max_tokens \(20000\) must be below"),
        ({"trigger_tokens": 1_600}, r"summary_max_tokens \+ ledger_max_tokens"),
        ({"summary_input_budget": 10}, r"summary_input_budget must be"),
        ({"read_only_tools": ["x"]}, r"read_only_tools must be a tuple"),
        ({"memory_mode": "always"}, r"memory_mode must be 'auto', 'tool' or 'off'"),
        ({"memory_budget": 10}, r"memory_budget must be a whole number of at least 50"),
        ({"correction_budget": 0}, r"correction_budget must be a whole number of at least 1"),
        ({"memory_age_from": "updated"}, r"memory_age_from must be 'created' or 'confirmed'"),
        ({"memory_search_max_tokens": 5}, r"memory_search_max_tokens must be a whole number"),
    ],
)
def test_settings_validation_names_the_setting(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings(**kwargs)  # type: ignore[arg-type]


def test_settings_from_env_and_mapping() -> None:
    assert Settings.from_env({"CTXGRAPH_CONTEXT_WINDOW": "32000"}).context_window == 32000
    memory = Settings.from_env({"CTXGRAPH_MEMORY_MODE": "tool", "CTXGRAPH_MEMORY_BUDGET": "300"})
    assert (memory.memory_mode, memory.memory_budget) == ("tool", 300)
    with pytest.raises(SettingsError, match="memory_mode must be"):
        Settings.from_env({"CTXGRAPH_MEMORY_MODE": "sometimes"})
    with pytest.raises(SettingsError, match="CTXGRAPH_CONTEXT_WINDOW must be a whole number"):
        Settings.from_env({"CTXGRAPH_CONTEXT_WINDOW": "lots"})
    with pytest.raises(SettingsError, match=r"unknown setting\(s\) \['trigger'\]"):
        Settings.from_mapping({"trigger": 1})


@pytest.mark.parametrize("user_id", ["", "a.b", "has space", None, "x" * 129])
def test_context_rejects_unusable_user_ids(user_id: object) -> None:
    with pytest.raises(ContextError, match=r"Context\.user_id"):
        Context(user_id=user_id)  # type: ignore[arg-type]


def test_missing_user_id_is_a_context_error_naming_the_ways_to_pass_one() -> None:
    with pytest.raises(ContextError, match=r"Context\.user_id is required") as raised:
        Context()
    message = str(raised.value)
    assert 'client.runs.create(thread_id, "ctxgraph", input=..., context={"user_id": ' in message
    assert "Manage Assistants" in message


def test_run_without_context_is_refused_with_instructions() -> None:
    model = ScriptedChatModel(script=["never"])
    graph = build_graph(
        models=Models(main=model), checkpointer=InMemorySaver(), store=InMemoryStore()
    )
    with pytest.raises(ContextError, match=r"pass context=Context\(user_id=\.\.\.\)"):
        graph.invoke({"messages": [("user", "hi")]}, config("no-context"))
    assert model.calls == 0
