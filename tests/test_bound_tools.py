"""Built-in tools are bound only once they can help, then kept; requests count what is bound.

A recording model (``ScriptedChatModel`` records the schemas bound for each call) drives
the real graph through a thread's life: a fresh thread binds only the caller's tools; an
offloaded result binds ``read_artifact`` and ``grep_artifact`` for good; the first
compaction binds ``read_history``; ``memory_search`` follows the memory mode. Every
measured request counts exactly the schemas bound for its state.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph import Context, Models, Settings, build_graph
from ctxgraph.graph import Graph
from ctxgraph.nodes.memory.search_tool import memory_search_tool
from ctxgraph.nodes.offload.read_tools import grep_artifact_tool, read_artifact_tool
from ctxgraph.nodes.offload.unlocks import SUBAGENT_KWARG, has_artifact
from ctxgraph.nodes.skills.policy import ToolPolicy
from ctxgraph.nodes.subagents.result import SUBAGENT_KEY
from ctxgraph.nodes.tools import read_history_tool
from ctxgraph.nodes.tools.binding import ToolBinding
from ctxgraph.state.scripted_model import ScriptedChatModel, bound_tool_names
from ctxgraph.state.settings import SettingsError
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.state.tool_unlocks import merge_unlocked
from tests.support.requests import request_builder
from tests.support.scripted import demo_summarizer, main_requests

CONTEXT = Context(user_id="binding-user")
READERS = {"read_artifact", "grep_artifact"}
LOG = "\n".join(f"{i:04d} {'ERROR disk full' if i == 321 else 'ok ' * 12}" for i in range(400))
QUIET = {"memory_extraction": "off"}


@tool
def dump_log() -> str:
    """Return the whole service log."""
    return LOG


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order by its id."""
    return f"order {order_id}: shipped"


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


class ExactBilling(ScriptedChatModel):
    """Reports as input tokens exactly the local count of what it was sent, schemas too.

    So the thread's calibration factor stays exactly 1.0 only while the graph measures
    each request with the very schemas it bound.
    """

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        result = super()._generate(messages, stop, run_manager, **kwargs)
        reply = result.generations[0].message
        if isinstance(reply, AIMessage):
            counter = TokenCounter()
            sent = counter.count_messages(messages) + counter.count_tools(kwargs.get("tools", []))
            reply.usage_metadata = {"input_tokens": sent, "output_tokens": 1, "total_tokens": sent}
        return result


def offload_ref(messages: list[BaseMessage]) -> str | None:
    for message in messages:
        offload = message.additional_kwargs.get("offload")
        if isinstance(offload, dict):
            return str(offload["ref"])
    return None


def agent_reply(messages: list[BaseMessage]) -> AIMessage:
    """Dumps the log when asked, greps the offloaded copy once, else answers."""
    last = messages[-1]
    if isinstance(last, HumanMessage) and "log" in str(last.content):
        return AIMessage("", tool_calls=[call("dump_log", f"dump-{len(messages)}")])
    if isinstance(last, ToolMessage) and last.name == "dump_log":
        ref = offload_ref([last])
        assert ref is not None, "the log should have been offloaded"
        return AIMessage("", tool_calls=[call("grep_artifact", "grep-1", ref=ref, pattern="ERROR")])
    return AIMessage(f"noted ({len(messages)})")


def bound(model: ScriptedChatModel) -> list[set[str]]:
    """The tool names bound for each main-model call, in order."""
    return [
        set(bound_tool_names(tools))
        for request, tools in zip(model.requests, model.tool_requests, strict=True)
        if request in main_requests(model)
    ]


def thread_graph(main: ScriptedChatModel, **settings: Any) -> Graph:
    return build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=main, summary=demo_summarizer()),
        tools=[dump_log, lookup_order],
        settings=Settings(**{**QUIET, "offload_tokens": 300, **settings}),
    )


def test_a_thread_unlocks_the_readers_on_its_first_artifact_and_history_on_compaction() -> None:
    main = ExactBilling(tool_responder=lambda messages, _names: agent_reply(messages))
    graph = thread_graph(main, trigger_messages=10, keep_messages=4)
    cfg = config("life")

    graph.invoke({"messages": [HumanMessage("hello")]}, cfg, context=CONTEXT)
    assert bound(main) == [{"dump_log", "lookup_order"}]
    assert not graph.get_state(cfg).values.get("tools_unlocked")

    out = graph.invoke({"messages": [HumanMessage("show me the log")]}, cfg, context=CONTEXT)
    # The call that dumps the log binds no reader; the calls after the offload bind both.
    unlocked = {*READERS, "dump_log", "lookup_order"}
    assert bound(main)[1:] == [{"dump_log", "lookup_order"}, unlocked, unlocked]
    (grepped,) = [
        m for m in out["messages"] if isinstance(m, ToolMessage) and m.name == "grep_artifact"
    ]
    assert grepped.status == "success" and "0321" in str(grepped.content)
    state = graph.get_state(cfg).values
    assert state["tools_unlocked"] == ["grep_artifact", "read_artifact"]
    assert "summary" not in state

    n = 3
    while "summary" not in graph.get_state(cfg).values:
        before = len(bound(main))
        graph.invoke({"messages": [HumanMessage(f"more {n}")]}, cfg, context=CONTEXT)
        n += 1
        assert n < 20, "the thread never compacted"
    state = graph.get_state(cfg).values
    assert offload_ref(state["messages"]) is None, "the compaction should have folded the stub"
    graph.invoke({"messages": [HumanMessage("and now?")]}, cfg, context=CONTEXT)
    calls = bound(main)
    # Up to the compacting turn: the readers (after the offload), no read_history; from the
    # compacting turn's model call on, read_history too, and the folded stub's readers stay.
    assert all("read_history" not in names for names in calls[:before])
    assert all(names >= READERS for names in calls[2:before])
    assert len(calls) - before == 2
    assert all(names == {*unlocked, "read_history"} for names in calls[before:])
    assert graph.get_state(cfg).values["tools_unlocked"] == [
        "grep_artifact",
        "read_artifact",
        "read_history",
    ]
    # Every request was measured with the schemas it was sent with: the factor never moved.
    # (The first two requests are too small to sample; all later ones bind readers.)
    calibration = graph.get_state(cfg).values["token_calibration"]
    assert calibration["factor"] == 1.0 and calibration["samples"] == len(calls) - 2


def test_the_unlock_is_kept_when_nothing_in_the_window_refers_to_the_artifact() -> None:
    main = ScriptedChatModel(tool_responder=lambda messages, _names: agent_reply(messages))
    graph = thread_graph(main)
    cfg = config("kept")
    graph.invoke({"messages": [HumanMessage("show me the log")]}, cfg, context=CONTEXT)
    values = graph.get_state(cfg).values
    (stub,) = [m for m in values["messages"] if offload_ref([m])]
    # Replace the stub under its id with a plain result: no ref anywhere in the state.
    plain = ToolMessage("(gone)", tool_call_id=stub.tool_call_id, name="dump_log", id=stub.id)
    graph.update_state(cfg, {"messages": [plain]})
    values = graph.get_state(cfg).values
    assert not has_artifact(values) and values["tools_unlocked"] == [
        "grep_artifact",
        "read_artifact",
    ]

    graph.invoke({"messages": [HumanMessage("thanks")]}, cfg, context=CONTEXT)
    assert bound(main)[-1] >= READERS
    # Without the kept unlock the same state would bind no reader.
    binding = ToolBinding([dump_log, read_artifact_tool(), grep_artifact_tool()])
    assert binding.names({**values, "tools_unlocked": []}, Settings()) == {"dump_log"}
    assert binding.names(values, Settings()) == {"dump_log", *READERS}


@pytest.mark.parametrize(
    ("settings", "run", "expected"),
    [
        ({"memory_mode": "auto"}, None, False),
        ({"memory_mode": "tool"}, None, True),
        ({"memory_mode": "auto", "memory_search_in_auto": True}, None, True),
        ({"memory_mode": "auto"}, {"memory_mode": "tool"}, True),
        ({"memory_mode": "tool"}, {"memory_mode": "auto"}, False),
        ({"memory_mode": "tool"}, {"memory_mode": "off"}, False),
    ],
)
def test_memory_search_follows_the_runs_memory_mode(
    settings: dict[str, Any], run: dict[str, Any] | None, expected: bool
) -> None:
    main = ScriptedChatModel(script=["hi"])
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=main),
        tools=[lookup_order],
        settings=Settings(**QUIET, **settings),
    )
    context = Context(user_id="u", settings=Settings(**run) if run else None)
    graph.invoke({"messages": [HumanMessage("hello")]}, config("mem"), context=context)
    names = bound_tool_names(main.tool_requests[0])
    assert ("memory_search" in names) is expected
    assert "lookup_order" in names and not names & {*READERS, "read_history"}


def test_memory_search_in_auto_is_a_checked_setting_with_an_environment_variable() -> None:
    assert Settings().memory_search_in_auto is False
    assert Settings.from_env({"CTXGRAPH_MEMORY_SEARCH_IN_AUTO": "yes"}).memory_search_in_auto
    with pytest.raises(SettingsError, match="memory_search_in_auto must be True or False"):
        Settings(memory_search_in_auto=1)  # type: ignore[arg-type]


def hallucinating(*calls: dict[str, Any]) -> ScriptedChatModel:
    return ScriptedChatModel(script=[AIMessage("", tool_calls=list(calls)), "done"])


def test_a_call_of_an_unbound_built_in_gets_an_error_result_and_the_run_goes_on() -> None:
    main = hallucinating(
        call("read_artifact", "c1", ref="art-0123456789abcdef01234567"),
        call("read_history", "c2", version=1),
        call("memory_search", "c3", query="coffee"),
        call("lookup_order", "c4", order_id="A-1"),
    )
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=main),
        tools=[lookup_order],
        settings=Settings(**QUIET),
    )
    out = graph.invoke({"messages": [HumanMessage("hi")]}, config("halluc"), context=CONTEXT)
    results = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert results["c1"].status == "error"
    assert results["c1"].content == (
        "Error: read_artifact is not available: this thread has no offloaded content yet, "
        "so there is no artifact to read. Do not call it."
    )
    assert results["c2"].status == "error"
    assert results["c2"].content == (
        "Error: read_history is not available: nothing in this thread has been compacted "
        "yet, so there is no archive to read. Do not call it."
    )
    assert results["c3"].status == "error"
    assert "memory mode auto" in str(results["c3"].content)
    assert results["c4"].status == "success" and results["c4"].content == "order A-1: shipped"
    # The model saw the errors, and the tools stayed unbound.
    second = main.requests[1]
    assert [m.content for m in second if isinstance(m, ToolMessage)] == [
        results[c].content for c in ("c1", "c2", "c3", "c4")
    ]
    assert bound_tool_names(main.tool_requests[1]) == {"lookup_order"}
    assert out["messages"][-1].content == "done"


def test_an_unlocked_reader_runs_and_a_hallucinated_one_of_a_tool_mode_run_is_not_refused() -> None:
    main = hallucinating(call("memory_search", "m1", query="coffee"))
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=main),
        settings=Settings(**QUIET, memory_mode="tool"),
    )
    out = graph.invoke({"messages": [HumanMessage("hi")]}, config("tool"), context=CONTEXT)
    (result,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert result.status == "success" and result.content == "[]"


def tools_of_a_graph() -> list[BaseTool]:
    return [
        lookup_order,
        read_history_tool(),
        read_artifact_tool(),
        grep_artifact_tool(),
        memory_search_tool(Settings()),
    ]


class CountingCounter(TokenCounter):
    """Counts how often tool schemas are counted."""

    def __init__(self) -> None:
        super().__init__()
        self.tool_counts = 0

    def count_tools(self, tools: Any) -> int:
        self.tool_counts += 1
        return super().count_tools(tools)


def stub_state() -> Any:
    ask = AIMessage("", tool_calls=[call("dump_log", "d1")], id="a1")
    stub = ToolMessage(
        "[offloaded]",
        tool_call_id="d1",
        name="dump_log",
        id="t1",
        additional_kwargs={"offload": {"ref": "art-" + "0" * 24, "sha256": "x", "tokens": 9}},
    )
    return {"messages": [HumanMessage("log?", id="h1"), ask, stub]}


def test_the_measured_request_counts_the_schemas_bound_for_its_state() -> None:
    counter = CountingCounter()
    tools = tools_of_a_graph()
    builder = request_builder(tools, counter)
    # Every set a state can bind is counted at build time, once: a run loads no tokenizer.
    assert counter.tool_counts == 8
    plain = TokenCounter()
    settings = Settings()
    fresh: Any = {"messages": [HumanMessage("hello", id="h1")]}
    compacted: Any = {**stub_state(), "compaction": {"version": 1, "checksum": "c"}}
    cases = [
        (fresh, settings, [lookup_order]),
        (stub_state(), settings, [lookup_order, tools[2], tools[3]]),
        (compacted, settings, [lookup_order, tools[1], tools[2], tools[3]]),
        (fresh, Settings(memory_mode="tool"), [lookup_order, tools[4]]),
    ]
    for state, run, sent in cases:
        request = builder.build(state, run)
        assert request.tool_tokens == plain.count_tools(sent)
        expected = plain.count_messages(request) + plain.count_tools(sent)
        assert builder.local_tokens(request) == expected
        assert builder.measure(request).tokens == expected
        assert builder.measure_state(state, run).tokens == expected
    # A plain list of messages counts the tools every state binds.
    assert builder.tool_tokens == plain.count_tools([lookup_order])
    assert builder.local_tokens([HumanMessage("x")]) == (
        plain.count_messages([HumanMessage("x")]) + plain.count_tools([lookup_order])
    )
    # Each distinct set was counted once, however often it was measured.
    assert counter.tool_counts == 8


def test_the_skill_policy_still_restricts_what_is_bound() -> None:
    binding = ToolBinding(tools_of_a_graph())
    state = {**stub_state(), "compaction": {"version": 2}}
    policy = ToolPolicy(frozenset({"read_artifact", "read_history"}), "skill x")
    assert binding.names(state, Settings(), policy) == {"read_artifact", "read_history"}
    assert binding.names(state, Settings(skill_policy="advisory"), policy) == {
        "lookup_order",
        "read_history",
        *READERS,
    }
    # The policy never binds a reader the thread has not unlocked.
    assert binding.names({"messages": []}, Settings(), policy) == set()


def test_every_artifact_signal_unlocks_the_readers_and_only_the_mark_unlocks_history() -> None:
    binding = ToolBinding([read_history_tool(), read_artifact_tool(), grep_artifact_tool()])

    def unlock_update(state: Any) -> dict[str, list[str]]:
        return binding.unlock_update(state, Settings())

    ref = "art-" + "1" * 24
    signals: list[Any] = [
        stub_state(),
        {"messages": [AIMessage("", additional_kwargs={"offload_args": [{"ref": ref}]})]},
        {
            "messages": [
                ToolMessage(
                    "r",
                    tool_call_id="t",
                    additional_kwargs={SUBAGENT_KEY: {"transcript_ref": ref, "result_ref": None}},
                )
            ]
        },
        {"messages": [], "summary": {"ledger": {"artifacts": [{"ref": ref, "kind": "x"}]}}},
        {"messages": [], "summary": {"ledger": {"folded_artifacts": 3}}},
        {"messages": [], "delegations": {"entries": [{"id": "t", "transcript_ref": ref}]}},
    ]
    assert SUBAGENT_KWARG == SUBAGENT_KEY
    for state in signals:
        assert unlock_update(state) == {"tools_unlocked": ["grep_artifact", "read_artifact"]}
    nothing: list[Any] = [
        {"messages": [HumanMessage(f"see {ref}")]},
        {"messages": [], "summary": {"ledger": {"artifacts": []}}, "compaction": {"version": 0}},
        {"messages": [], "delegations": {"entries": [{"id": "t", "transcript_ref": None}]}},
    ]
    for state in nothing:
        assert unlock_update(state) == {}
    assert unlock_update({"messages": [], "compaction": {"version": 1}}) == {
        "tools_unlocked": ["read_history"]
    }
    # Already kept: nothing new to write.
    assert (
        unlock_update({**stub_state(), "tools_unlocked": ["grep_artifact", "read_artifact"]}) == {}
    )
    assert merge_unlocked(["read_history"], ["read_artifact", "read_history"]) == [
        "read_artifact",
        "read_history",
    ]
    assert merge_unlocked(["read_artifact"], None) == ["read_artifact"]
