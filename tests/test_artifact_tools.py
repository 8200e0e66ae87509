"""The read_artifact and grep_artifact tools, run by a ToolNode inside a graph."""

from __future__ import annotations

import re
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.nodes.offload.read_tools import (
    MAX_RESULT_TOKENS,
    READ_TOOL_NAMES,
    grep_artifact_tool,
    read_artifact_tool,
)
from ctxgraph.nodes.tools import tools_node
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import count_text
from ctxgraph.store.artifacts import ArtifactStore, reconstruct
from ctxgraph.store.artifacts.grep import InvalidPatternError
from ctxgraph.store.artifacts.records import unknown_artifact
from tests.support.stores import BACKENDS, async_backend

LOG = "".join(f"{i:03d} {'ERROR disk full' if i in (10, 12, 40) else 'ok'}\n" for i in range(60))
MISSING = "art-0123456789abcdef01234567"
ERROR_TAIL = "\n Please fix your mistakes."


def tools() -> list[Any]:
    return [read_artifact_tool(), grep_artifact_tool()]


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def agent(model: ScriptedChatModel, store: BaseStore | None) -> Any:
    """A model node and the project's tools node, looping until the model stops calling."""
    bound = model.bind_tools(tools())

    def think(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [bound.invoke(state["messages"])]}

    async def athink(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", RunnableLambda(think, afunc=athink))
    builder.add_node("tools", tools_node(tools()))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "model")
    return builder.compile(store=store)


def tool_only(store: BaseStore | None) -> Any:
    """Just the tools node: the input's last AI message holds the calls."""
    builder = StateGraph(MessagesState)
    builder.add_node("tools", tools_node(tools()))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    return builder.compile(store=store)


def config(thread_id: str, **extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, **extra}


def results(messages: list[BaseMessage]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


def test_the_tools_are_named_and_described() -> None:
    read, grep = tools()
    assert {read.name, grep.name} == READ_TOOL_NAMES == {"read_artifact", "grep_artifact"}
    # The ref's shape is named in each description (the schemas carry no argument help).
    assert "`ref` (art-" in read.description and "`ref` art-" in grep.description
    assert "next offset" in read.description and "grep_artifact" in read.description
    assert "regular expression" in grep.description and "read_artifact" in grep.description
    assert set(read.tool_call_schema.model_json_schema()["properties"]) == {
        "ref",
        "offset",
        "limit",
    }
    assert set(grep.tool_call_schema.model_json_schema()["properties"]) == {
        "ref",
        "pattern",
        "max_matches",
        "context",
    }


def _expected_calls(ref: str) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[
            call("read_artifact", "r1", ref=ref, offset=9, limit=3),
            call("grep_artifact", "g1", ref=ref, pattern=r"ERROR \w+", context=1),
            call("read_artifact", "r2", ref=MISSING),
            call("grep_artifact", "g2", ref=ref, pattern="disk (full"),
            call("read_artifact", "r3", ref=ref, offset=-5),
            call("read_artifact", "r4", ref=ref, offset=500),
        ],
    )


def _check_results(found: dict[str, ToolMessage], ref: str) -> None:
    assert found["r1"].status == "success"
    assert found["r1"].content == "\n".join(
        [
            f"[artifact {ref}: tool_result of tail_log, {len(LOG)} bytes, 60 lines "
            "(offsets 0-59), final newline: yes]",
            '[format: one "<offset>\\t<text>" row per line; a line longer than 2000 '
            'characters is split, each later part shown as "<offset>+\\t<text>"]',
            "9\t009 ok",
            "10\t010 ERROR disk full",
            "11\t011 ok",
            "[showed offsets 9-11 of 60; next offset: 12]",
        ]
    )
    assert found["g1"].status == "success"
    assert found["g1"].content == "\n".join(
        [
            f"[grep {ref} for 'ERROR \\\\w+': 3 of 60 lines match; \"<offset>:\" marks a "
            'matching line, "<offset>-" a context line (read offsets)]',
            "9-\t009 ok",
            "10:\t010 ERROR disk full",
            "11-\t011 ok",
            "12:\t012 ERROR disk full",
            "13-\t013 ok",
            "--",
            "39-\t039 ok",
            "40:\t040 ERROR disk full",
            "41-\t041 ok",
            "[all 3 matching lines shown]",
        ]
    )
    missing = found["r2"]
    assert missing.status == "error"
    assert missing.content == f"Error: {unknown_artifact(MISSING)!r}{ERROR_TAIL}"
    assert MISSING in missing.content
    bad_pattern = found["g2"]
    assert bad_pattern.status == "error"
    assert bad_pattern.content == (
        "Error: "
        + repr(
            InvalidPatternError(
                "invalid regular expression 'disk (full': missing ), unterminated subpattern "
                "at position 5"
            )
        )
        + ERROR_TAIL
    )
    assert found["r3"].status == "error"
    assert found["r3"].content == (
        f"Error: {ValueError('offset must be 0 or more, got -5')!r}{ERROR_TAIL}"
    )
    assert found["r4"].status == "success"
    assert found["r4"].content.endswith(
        "[offset 500 is past the end: the artifact has 60 lines (offsets 0-59)]"
    )


def test_a_model_reads_and_greps_an_artifact_in_a_graph(
    backend: BaseStore, thread_id: str, recwarn: pytest.WarningsRecorder
) -> None:
    ref = (
        ArtifactStore(backend, thread_id)
        .put("tool_result", LOG, source_id="call-0", tool_name="tail_log")
        .ref
    )
    model = ScriptedChatModel(script=[_expected_calls(ref), "The disk filled up at 010."])
    out = agent(model, backend).invoke(
        {"messages": [HumanMessage("what went wrong?")]}, config(thread_id)
    )
    found = results(out["messages"])
    _check_results(found, ref)
    # The model saw every result, errors included, and answered.
    assert [m.tool_call_id for m in model.requests[1] if isinstance(m, ToolMessage)] == [
        "r1",
        "g1",
        "r2",
        "g2",
        "r3",
        "r4",
    ]
    assert out["messages"][-1].content == "The disk filled up at 010."
    names = {tool["function"]["name"] for tool in model.tool_requests[0]}
    assert names == READ_TOOL_NAMES
    noise = [str(w.message) for w in recwarn if "PydanticSerializationUnexpected" in str(w.message)]
    assert noise == []


@pytest.mark.parametrize("kind", BACKENDS)
async def test_the_async_graph_gives_the_same_results(
    kind: str, database_uri: str, thread_id: str
) -> None:
    async with async_backend(kind, database_uri) as store:
        artifacts = ArtifactStore(store, thread_id)
        ref = (
            await artifacts.aput("tool_result", LOG, source_id="call-0", tool_name="tail_log")
        ).ref
        model = ScriptedChatModel(script=[_expected_calls(ref), "done"])
        out = await agent(model, store).ainvoke(
            {"messages": [HumanMessage("what went wrong?")]}, config(thread_id)
        )
    _check_results(results(out["messages"]), ref)


NEXT = re.compile(r"next offset: (\d+)")


def pager(ref: str) -> ScriptedChatModel:
    """A model that reads an artifact page by page, passing the offset each page names."""

    def reply(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            offset = 0
        else:
            assert isinstance(last, ToolMessage) and last.status == "success", last.content
            found = NEXT.search(str(last.content).split("\n")[-1])
            if found is None:
                return AIMessage("read it all")
            offset = int(found.group(1))
        number = sum(isinstance(m, ToolMessage) for m in messages)
        return AIMessage(
            content="",
            tool_calls=[call("read_artifact", f"p{number}", ref=ref, offset=offset, limit=1000)],
        )

    return ScriptedChatModel(responder=reply)


def test_a_model_following_next_offset_rebuilds_the_artifact_from_tool_messages(
    thread_id: str,
) -> None:
    content = (
        "".join(chr(0x4E00 + i % 2_000) for i in range(200_000))  # one long Chinese line
        + "\r\nemoji 😀👍🏽\n\n\ttabbed\n"
        + "".join(f"{i} tail line\n" for i in range(3_000))
        + "no final newline"
    )
    store = InMemoryStore()
    ref = ArtifactStore(store, thread_id).put("tool_result", content, source_id="c").ref
    out = agent(pager(ref), store).invoke(
        {"messages": [HumanMessage("read it")]}, config(thread_id, recursion_limit=2_000)
    )
    pages = [str(m.content) for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(pages) > 5
    assert all(count_text(page) <= MAX_RESULT_TOKENS for page in pages)
    assert reconstruct(pages) == content
    assert out["messages"][-1].content == "read it all"


def test_results_never_exceed_the_cap(thread_id: str) -> None:
    store = InMemoryStore()
    artifacts = ArtifactStore(store, thread_id)
    dense = "".join(f"{i} " + "match " * 300 + "\n" for i in range(5_000))
    ref = artifacts.put("tool_result", dense, source_id="dense").ref
    message = AIMessage(
        content="",
        tool_calls=[
            call("read_artifact", "r", ref=ref, offset=0, limit=1_000),
            call("grep_artifact", "g", ref=ref, pattern="match", max_matches=500, context=20),
            call("grep_artifact", "g0", ref=ref, pattern="^4999 ", max_matches=0, context=-3),
        ],
    )
    found = results(tool_only(store).invoke({"messages": [message]}, config(thread_id))["messages"])
    for key in ("r", "g", "g0"):
        assert found[key].status == "success"
        assert count_text(str(found[key].content)) <= MAX_RESULT_TOKENS
    assert "(token limit reached)" in str(found["r"].content).split("\n")[-1]
    assert "more matching lines not shown (token limit reached)" in str(found["g"].content)
    # max_matches and context are clamped (to 1 and 0).
    line = "4999 " + "match " * 300
    assert str(found["g0"].content).split("\n")[1:] == [
        f"4999:\t{line[:400]}…  [long line cut: characters 0-400 of {len(line)}]",
        "[all 1 matching lines shown]",
    ]


def test_without_a_store_or_thread_id_the_model_is_told_why(thread_id: str) -> None:
    message = AIMessage(content="", tool_calls=[call("read_artifact", "r", ref=MISSING)])
    no_store = tool_only(None).invoke({"messages": [message]}, config(thread_id))
    result = results(no_store["messages"])["r"]
    assert result.status == "error"
    assert "without a LangGraph Store" in str(result.content)
    no_thread = tool_only(InMemoryStore()).invoke({"messages": [message]}, {"configurable": {}})
    result = results(no_thread["messages"])["r"]
    assert result.status == "error"
    assert "the run has no thread id" in str(result.content)
