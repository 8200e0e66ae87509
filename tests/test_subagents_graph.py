"""Subagents through the graph: isolation, limits, bounded results, the delegation record,
compaction and streaming, asserted on the exact requests the scripted models receive."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph import Context, Models, Settings, SubagentsPart, build_graph
from ctxgraph.graph.builder import Graph
from ctxgraph.nodes.subagents.render import render_delegations
from ctxgraph.state.delegations import MAX_DELEGATIONS, merge_delegations
from ctxgraph.state.messages import message_origin
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.subagents import SubagentSpec, SubagentSpecError
from ctxgraph.state.tokens import count_text
from ctxgraph.store.artifacts import ArtifactStore
from tests.support.scripted import Dispatch, demo_summarizer, main_requests

CONTEXT = Context(user_id="delegating-user")
CONFIG: Any = {"configurable": {"thread_id": "t"}}
PROMPT = "You research one question and report the facts you found."


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found: {query}"


def task(call_id: str, description: str, kind: str = "researcher", **extra: Any) -> dict[str, Any]:
    args = {"description": description, "subagent_type": kind, **extra}
    return {"name": "task", "args": args, "id": call_id, "type": "tool_call"}


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def delegate(*calls: dict[str, Any], text: str = "") -> AIMessage:
    return AIMessage(content=text, tool_calls=list(calls))


def parent_model(first: AIMessage | Callable[[list[BaseMessage]], AIMessage]) -> ScriptedChatModel:
    """A main model: ``first`` answers the user's message, then it wraps up after results."""

    def reply(request: list[BaseMessage]) -> AIMessage:
        last = request[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(content="all delegated work is back")
        if callable(first):
            return first(request)
        return first

    return ScriptedChatModel(responder=Dispatch(main=reply))


def child_model(answer: Callable[[list[BaseMessage]], AIMessage | str]) -> ScriptedChatModel:
    def reply(request: list[BaseMessage]) -> AIMessage:
        value = answer(request)
        return AIMessage(content=value) if isinstance(value, str) else value

    return ScriptedChatModel(responder=reply)


def echo_child() -> ScriptedChatModel:
    return child_model(lambda request: f"report on: {request[1].content}")


def graph_for(
    main: ScriptedChatModel,
    child: ScriptedChatModel | None = None,
    *,
    specs: Sequence[SubagentSpec] | None = None,
    saver: InMemorySaver | None = None,
    store: InMemoryStore | None = None,
    summary: ScriptedChatModel | None = None,
    tools: Sequence[BaseTool] = (lookup,),
    **settings: Any,
) -> Graph:
    if specs is None:
        specs = [
            SubagentSpec(
                name="researcher",
                description="Researches one question.",
                system_prompt=PROMPT,
                tools=(lookup,),
                model=child,
            )
        ]
    values: dict[str, Any] = {"memory_extraction": "off", "memory_mode": "off", **settings}
    return build_graph(
        checkpointer=saver or InMemorySaver(),
        store=store if store is not None else InMemoryStore(),
        models=Models(main=main, summary=summary),
        tools=tools,
        settings=Settings(**values),
        parts=[SubagentsPart(specs)],
    )


def turn(graph: Graph, text: str) -> list[BaseMessage]:
    result = graph.invoke({"messages": [HumanMessage(text)]}, CONFIG, context=CONTEXT)
    return list(result["messages"])


def results(messages: Sequence[BaseMessage]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage) and m.name == "task"}


def record(graph: Graph) -> dict[str, Any]:
    values = graph.get_state(CONFIG).values
    return {entry["id"]: entry for entry in values["delegations"]["entries"]}


def bound(model: ScriptedChatModel, index: int = -1) -> list[str]:
    return [schema["function"]["name"] for schema in model.tool_requests[index]]


# --- isolation ------------------------------------------------------------------------


def test_a_child_sees_only_its_system_prompt_and_the_task_text() -> None:
    def first(request: list[BaseMessage]) -> AIMessage:
        if request[-1].content != "check customs":
            return AIMessage(content="noted")
        return delegate(
            task("c1", "Find the parcel's customs status.", expected_output="One line.")
        )

    main = parent_model(first)
    child = echo_child()
    graph = graph_for(main, child, summary=demo_summarizer())
    turn(graph, "My parcel id is PX-7781 and I am in a hurry.")
    turn(graph, "check customs")

    assert len(child.requests) == 1
    request = child.requests[0]
    assert [type(m) for m in request] == [SystemMessage, HumanMessage]
    assert request[0].content == PROMPT
    assert request[1].content == "Find the parcel's customs status.\n\nExpected output:\nOne line."
    assert all("PX-7781" not in str(m.content) for m in request)
    assert "task" not in bound(child)
    assert set(bound(child)) == {"lookup", "read_artifact", "grep_artifact"}


def test_the_general_purpose_subagent_has_the_parents_tools_but_not_task() -> None:
    main = parent_model(delegate(task("c1", "Look up the tariff.", kind="general-purpose")))
    graph = graph_for(main, specs=[], tools=(lookup,))
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=main),
        tools=(lookup,),
        settings=Settings(memory_extraction="off", memory_mode="off"),
        parts=[SubagentsPart(True)],
    )
    turn(graph, "go")
    child_request = main.requests[1]
    assert child_request[0].content.startswith("You are a subagent working on one delegated task")
    assert child_request[1].content == "Look up the tariff."
    assert bound(main, 1) == ["lookup", "read_artifact", "grep_artifact"]
    assert "task" in bound(main, 0)
    assert "general-purpose" in str(main.tool_requests[0])


def test_no_subagents_means_no_task_tool_and_no_subagent_node() -> None:
    main = ScriptedChatModel(script=["hello"])
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=main),
        settings=Settings(memory_extraction="off", memory_mode="off"),
    )
    turn(graph, "hi")
    assert "task" not in bound(main)
    assert "subagent" not in graph.get_graph().nodes


# --- arguments and limits ---------------------------------------------------------------


def test_four_task_calls_give_three_results_and_one_limit_error() -> None:
    main = parent_model(delegate(*(task(f"c{n}", f"question {n}") for n in range(4))))
    child = echo_child()
    graph = graph_for(main, child)
    messages = turn(graph, "research four things")

    found = results(messages)
    assert sorted(found) == ["c0", "c1", "c2", "c3"]
    for n in range(3):
        assert found[f"c{n}"].status == "success"
        assert found[f"c{n}"].content.startswith(f"report on: question {n}\n\n[subagent ")
    capped = found["c3"]
    assert capped.status == "error"
    assert "at most 3 task calls run per answer" in capped.content
    assert capped.additional_kwargs["subagent"]["stop_reason"] == "parallel_limit"
    assert len(child.requests) == 3
    entries = record(graph)
    assert [entries[f"c{n}"]["status"] for n in range(4)] == [
        "completed",
        "completed",
        "completed",
        "capped",
    ]
    assert isinstance(messages[-1], AIMessage)
    assert messages[-1].content == "all delegated work is back"


def test_four_task_calls_also_run_in_parallel_async() -> None:
    main = parent_model(delegate(*(task(f"c{n}", f"question {n}") for n in range(4))))
    child = echo_child()
    graph = graph_for(main, child)
    result = asyncio.run(graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, context=CONTEXT))
    found = results(result["messages"])
    assert [found[f"c{n}"].status for n in range(4)] == ["success"] * 3 + ["error"]
    assert len(child.requests) == 3


def test_the_run_limit_caps_later_task_calls_of_the_same_run() -> None:
    answers = iter(
        [
            delegate(*(task(f"a{n}", f"first {n}") for n in range(3))),
            delegate(*(task(f"b{n}", f"second {n}") for n in range(3))),
            delegate(task("c0", "third 0")),
            AIMessage(content="stopping"),
        ]
    )
    main = ScriptedChatModel(responder=Dispatch(main=lambda request: next(answers)))
    child = echo_child()
    graph = graph_for(main, child)
    messages = turn(graph, "research a lot")
    found = results(messages)
    assert all(found[f"a{n}"].status == "success" for n in range(3))
    assert all(found[f"b{n}"].status == "success" for n in range(3))
    assert found["c0"].status == "error"
    assert found["c0"].additional_kwargs["subagent"]["stop_reason"] == "run_limit"
    assert len(child.requests) == 6


def test_unknown_arguments_and_unknown_types_are_error_results_naming_the_problem() -> None:
    main = parent_model(
        delegate(
            task("c1", "question", priority="high"),
            task("c2", "question", kind="poet"),
            {"name": "task", "args": {"subagent_type": "researcher"}, "id": "c3"},
        )
    )
    child = echo_child()
    graph = graph_for(main, child)
    found = results(turn(graph, "go"))
    assert "unknown argument 'priority'" in found["c1"].content
    assert found["c1"].additional_kwargs["subagent"]["stop_reason"] == "invalid_arguments"
    assert (
        "unknown subagent_type 'poet'; the valid types are: general-purpose, researcher."
        in found["c2"].content
    )
    assert found["c2"].additional_kwargs["subagent"]["stop_reason"] == "unknown_type"
    assert "missing argument 'description'" in found["c3"].content
    assert all(m.status == "error" for m in found.values())
    assert child.requests == []
    assert {e["status"] for e in record(graph).values()} == {"failed"}


def test_spec_errors_name_the_field() -> None:
    with pytest.raises(SubagentSpecError, match="name must be lowercase"):
        SubagentSpec(name="Bad Name", description="d", system_prompt="p")
    with pytest.raises(SubagentSpecError, match="system_prompt must be a non-empty string"):
        SubagentSpec(name="ok", description="d", system_prompt=" ")
    spec = SubagentSpec(name="twin", description="d", system_prompt="p")
    with pytest.raises(ValueError, match=r"\['twin'\] appear more than once"):
        graph_for(ScriptedChatModel(), specs=[spec, spec])


# --- bounded, verifiable results --------------------------------------------------------


def test_a_long_answer_is_cut_to_the_budget_and_its_refs_read_back_in_full() -> None:
    long_answer = "\n".join(f"Finding {n}: the route via depot {n} is open." for n in range(900))
    assert count_text(long_answer) > 10_000
    main = parent_model(delegate(task("c1", "Survey every depot.")))
    child = child_model(
        lambda request: (
            AIMessage(
                content="", tool_calls=[{"name": "lookup", "args": {"query": "depots"}, "id": "k1"}]
            )
            if len(request) == 2
            else long_answer
        )
    )
    store = InMemoryStore()
    graph = graph_for(main, child, store=store)
    result = results(turn(graph, "survey"))["c1"]

    assert count_text(str(result.content)) <= 2_000
    assert str(result.content).startswith("Finding 0: the route via depot 0 is open.")
    meta = result.additional_kwargs["subagent"]
    assert meta["status"] == "completed" and meta["cut"] is True
    assert meta["result_sha256"] == hashlib.sha256(long_answer.encode()).hexdigest()
    artifacts = ArtifactStore(store, "t")
    assert artifacts.read_text(meta["result_ref"]) == long_answer
    transcript = artifacts.read_text(meta["transcript_ref"])
    assert transcript.startswith(f"[1] system: {PROMPT}\n[2] user: Survey every depot.\n")
    assert '    call lookup (k1): {"query": "depots"}' in transcript
    assert "[4] tool lookup (k1): found: depots" in transcript
    assert transcript.endswith(long_answer + "\n")
    assert f"full answer: {meta['result_ref']}" in str(result.content)
    assert f"transcript: {meta['transcript_ref']}" in str(result.content)


def test_an_empty_final_answer_falls_back_to_the_last_text_else_fails() -> None:
    main = parent_model(delegate(task("c1", "first"), task("c2", "second")))

    def answer(request: list[BaseMessage]) -> AIMessage:
        if request[1].content == "first":
            if len(request) == 2:
                return AIMessage(
                    content="interim finding",
                    tool_calls=[{"name": "lookup", "args": {"query": "x"}, "id": "k1"}],
                )
            return AIMessage(content="")
        return AIMessage(content="")

    graph = graph_for(main, child_model(answer))
    found = results(turn(graph, "go"))
    assert found["c1"].status == "success"
    assert str(found["c1"].content).startswith("interim finding\n\n")
    assert found["c2"].status == "error"
    assert found["c2"].additional_kwargs["subagent"]["stop_reason"] == "empty_answer"


def test_a_raising_child_does_not_stop_its_sibling() -> None:
    main = parent_model(delegate(task("c1", "explode"), task("c2", "fine")))

    def answer(request: list[BaseMessage]) -> str:
        if request[1].content == "explode":
            raise RuntimeError("provider said no")
        return "fine result"

    graph = graph_for(main, child_model(answer))
    found = results(turn(graph, "go"))
    assert found["c1"].status == "error"
    assert "error: RuntimeError: provider said no" in found["c1"].content
    assert found["c1"].additional_kwargs["subagent"]["status"] == "failed"
    assert found["c2"].status == "success"
    assert str(found["c2"].content).startswith("fine result")
    entries = record(graph)
    assert (entries["c1"]["status"], entries["c2"]["status"]) == ("failed", "completed")


def test_a_child_over_its_step_limit_returns_its_partial_text() -> None:
    main = parent_model(delegate(task("c1", "dig forever")))
    counter = iter(range(1000))

    def answer(request: list[BaseMessage]) -> AIMessage:
        n = next(counter)
        return AIMessage(
            content=f"partial finding {n}",
            tool_calls=[{"name": "lookup", "args": {"query": str(n)}, "id": f"k{n}"}],
        )

    child = child_model(answer)
    graph = graph_for(main, child, subagent_max_steps=8)
    found = results(turn(graph, "go"))["c1"]
    meta = found.additional_kwargs["subagent"]
    assert (meta["status"], meta["stop_reason"]) == ("capped", "step_limit")
    last = len(child.requests) - 1
    assert str(found.content).startswith(f"partial finding {last}\n\n")
    assert "capped (step_limit)" in found.content
    assert record(graph)["c1"]["status"] == "capped"


# --- the record -----------------------------------------------------------------------


def test_after_two_compactions_the_model_still_sees_every_delegations_status() -> None:
    def first(request: list[BaseMessage]) -> AIMessage:
        text = str(request[-1].content)
        if text.startswith("delegate "):
            n = text.split()[1]
            return delegate(task(f"d{n}", f"question {n}"))
        return AIMessage(content="ok")

    main = parent_model(first)
    graph = graph_for(
        main, echo_child(), summary=demo_summarizer(), trigger_messages=6, keep_messages=2
    )
    for n in range(3):
        turn(graph, f"delegate {n}")
    for n in range(30):
        turn(graph, f"note {n}: more about the parcel")
        values = graph.get_state(CONFIG).values
        if int((values.get("compaction") or {}).get("version", 0)) >= 2:
            break
    assert int(values["compaction"]["version"]) >= 2
    assert not any(isinstance(m, ToolMessage) and m.name == "task" for m in values["messages"])
    turn(graph, "what did the helpers find?")
    request = main_requests(main)[-1]
    data = [m for m in request if message_origin(m) == "delegations"]
    assert len(data) == 1
    text = str(data[0].content)
    for n in range(3):
        ref = values["delegations"]["entries"][n]["transcript_ref"]
        assert f"- d{n} researcher: 'question {n}' - completed, transcript {ref}" in text
    assert data[0].additional_kwargs == {"origin": "delegations", "hide_from_ui": True}
    assert not any(message_origin(m) == "delegations" for m in values["messages"])


def test_a_final_status_never_changes_and_the_record_folds_beyond_fifty() -> None:
    merged = merge_delegations(None, [{"id": "a", "type": "r", "brief": "b", "status": "running"}])
    merged = merge_delegations(merged, [{"id": "a", "type": "r", "brief": "b", "status": "failed"}])
    merged = merge_delegations(
        merged, [{"id": "a", "type": "r", "brief": "b", "status": "completed"}]
    )
    assert merged["entries"][0]["status"] == "failed"
    for n in range(MAX_DELEGATIONS + 5):
        merged = merge_delegations(
            merged, [{"id": f"x{n}", "type": "r", "brief": "b", "status": "completed"}]
        )
    merged = merge_delegations(
        merged, [{"id": "run", "type": "r", "brief": "b", "status": "running"}]
    )
    assert len(merged["entries"]) == MAX_DELEGATIONS
    assert merged["folded"] == {"failed": 1, "completed": 6}
    assert merged["entries"][-1]["id"] == "run"
    assert "Earlier delegations, no longer listed: 6 completed, 1 failed." in render_delegations(
        merged
    )
    with pytest.raises(ValueError, match="status must be one of"):
        merge_delegations(merged, [{"id": "y", "status": "lost"}])


class Crash(BaseException):
    """Stands for the process dying in the middle of a child's run."""


def test_a_delegation_left_running_is_marked_cancelled_at_the_next_model_call() -> None:
    def first(request: list[BaseMessage]) -> AIMessage:
        if request[-1].content == "start":
            return delegate(task("c1", "interrupted work"))
        return AIMessage(content="fresh start")

    main = parent_model(first)
    child = ScriptedChatModel(script=[Crash()])
    graph = graph_for(main, child)
    with pytest.raises(Crash):
        turn(graph, "start")
    assert record(graph)["c1"]["status"] == "running"

    turn(graph, "hello again")
    assert record(graph)["c1"]["status"] == "cancelled"
    data = [m for m in main_requests(main)[-1] if message_origin(m) == "delegations"]
    assert "- c1 researcher: 'interrupted work' - cancelled (cancelled)" in str(data[0].content)


# --- streaming --------------------------------------------------------------------------


def _streamed(graph: Graph, *, subgraphs: bool) -> list[tuple[Any, Any]]:
    chunks: list[tuple[Any, Any]] = []
    for item in graph.stream(
        {"messages": [HumanMessage("go")]},
        CONFIG,
        context=CONTEXT,
        stream_mode="messages",
        subgraphs=subgraphs,
    ):
        chunks.append(item)  # type: ignore[arg-type]
    return chunks


def test_child_tokens_never_reach_the_parents_messages_stream() -> None:
    main = parent_model(delegate(task("c1", "question")))
    graph = graph_for(main, child_model(lambda request: "childtoken answer"))
    chunks = _streamed(graph, subgraphs=False)
    texts = [str(chunk.content) for chunk, _ in chunks if isinstance(chunk, AIMessageChunk)]
    assert texts and not any("childtoken" in text for text in texts)
    assert any("all delegated work is back" in "".join(texts) for _ in [0])


def test_with_subgraphs_child_tokens_carry_the_childs_namespace() -> None:
    main = parent_model(delegate(task("c1", "question")))
    graph = graph_for(main, child_model(lambda request: "childtoken answer"))
    chunks = _streamed(graph, subgraphs=True)
    child_chunks = [
        (namespace, chunk)
        for namespace, (chunk, _) in chunks
        if isinstance(chunk, AIMessageChunk) and "childtoken" in str(chunk.content)
    ]
    assert child_chunks
    ns = record(graph)["c1"]["checkpoint_ns"]
    assert all(namespace == (ns,) for namespace, _ in child_chunks)
    assert ns.startswith("subagent:")


# --- artifacts and embedding ------------------------------------------------------------


def test_a_child_reads_the_root_threads_artifacts_by_ref() -> None:
    big = "\n".join(f"row {n}: value {n * 7}" for n in range(4000))

    @tool
    def dump() -> str:
        """Dump the table."""
        return big

    answers = iter([AIMessage(content="", tool_calls=[{"name": "dump", "args": {}, "id": "d1"}])])

    def first(request: list[BaseMessage]) -> AIMessage:
        stub = next((m for m in request if isinstance(m, ToolMessage) and m.name == "dump"), None)
        if stub is None:
            return next(answers)
        ref = stub.additional_kwargs["offload"]["ref"]
        return delegate(task("c1", f"Find row 3999 in {ref}"))

    def main_reply(request: list[BaseMessage]) -> AIMessage:
        last = request[-1]
        if isinstance(last, ToolMessage) and last.name == "task":
            return AIMessage(content="thanks")
        return first(request)

    main = ScriptedChatModel(responder=Dispatch(main=main_reply))

    def child_answer(request: list[BaseMessage]) -> AIMessage:
        if len(request) == 2:
            ref = str(request[1].content).split()[-1]
            return AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": "grep_artifact",
                        "args": {"ref": ref, "pattern": "^row 3999:"},
                        "id": "g1",
                    }
                ],
            )
        return AIMessage(content=f"grep said: {request[-1].content}")

    child = child_model(child_answer)
    graph = graph_for(main, child, tools=(dump,), offload_tokens=2_000)
    found = results(turn(graph, "dump it and delegate"))["c1"]
    assert "row 3999: value 27993" in str(found.content)


def test_subagents_work_in_a_graph_embedded_as_a_subgraph() -> None:
    from langgraph.graph import END, START, MessagesState, StateGraph

    from ctxgraph.graph import as_subgraph

    main = parent_model(delegate(task("c1", "question")))
    child = echo_child()
    inner = as_subgraph(
        models=Models(main=main),
        settings=Settings(memory_extraction="off", memory_mode="off"),
        parts=[
            SubagentsPart(
                [
                    SubagentSpec(
                        name="researcher", description="d", system_prompt=PROMPT, model=child
                    )
                ]
            )
        ],
    )
    parent = StateGraph(MessagesState)
    parent.add_node("agent", inner)
    parent.add_edge(START, "agent")
    parent.add_edge("agent", END)
    compiled = parent.compile(checkpointer=InMemorySaver(), store=InMemoryStore())
    result = compiled.invoke({"messages": [HumanMessage("go")]}, CONFIG, context=CONTEXT)
    found = results(result["messages"])
    assert str(found["c1"].content).startswith("report on: question")
    assert len(child.requests) == 1


def test_a_child_step_replayed_after_a_crash_continues_the_childs_transcript() -> None:
    crashed: list[bool] = []

    def answer(request: list[BaseMessage]) -> AIMessage:
        if len(request) == 2:
            return AIMessage(content="", tool_calls=[call("lookup", {"query": "x"}, "k1")])
        if not crashed:
            crashed.append(True)
            raise Crash()
        return AIMessage(content="child final")

    main = parent_model(delegate(task("c1", "question")))
    child = child_model(answer)
    graph = graph_for(main, child)
    with pytest.raises(Crash):
        turn(graph, "go")
    assert graph.get_state(CONFIG).next == ("subagent",)

    result = graph.invoke(None, CONFIG, context=CONTEXT)
    assert str(results(result["messages"])["c1"].content).startswith("child final\n\n")
    # After the restart the child resumed from its tool result instead of starting over.
    assert [len(request) for request in child.requests] == [2, 4, 4]
    assert record(graph)["c1"]["status"] == "completed"


def test_usage_is_the_providers_when_reported_and_counted_otherwise() -> None:
    from ctxgraph.nodes.subagents.result import Outcome
    from ctxgraph.state.tokens import TokenCounter

    system = SystemMessage(content=PROMPT, id="s")
    asked = HumanMessage(content="Find the release date", id="h")
    reported = AIMessage(
        content="It shipped in May.",
        id="a1",
        usage_metadata={"input_tokens": 41, "output_tokens": 7, "total_tokens": 48},
    )
    counted = AIMessage(content="Released on 2026-05-04.", id="a2")
    outcome = Outcome("completed", "final_answer", [system, asked, reported, counted])
    counter = TokenCounter()
    assert outcome.usage() == (
        41 + counter.count_messages([system, asked, reported]),
        7 + counter.count_message(counted),
    )
