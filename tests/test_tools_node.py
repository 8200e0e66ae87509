"""The tools node runs every tool call through its chain of wrappers, sync and async."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt.tool_node import ToolCallRequest

from ctxgraph.nodes.tools import ToolWrapper, read_history_tool, tools_node
from ctxgraph.nodes.tools.wrappers import AsyncExecute, Execute, ToolResult

RAN: list[str] = []


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    RAN.append("add")
    return a + b


@tool
def delete_everything() -> str:
    """A call a policy refuses."""
    RAN.append("delete_everything")
    return "deleted"


@tool
def broken() -> str:
    """A tool that always fails."""
    RAN.append("broken")
    raise ValueError("the disk is on fire")


TOOLS: list[BaseTool] = [add, delete_everything, broken]


class Recorder:
    """Records each call it sees, before and after the rest of the chain."""

    def __init__(self, label: str, log: list[str]) -> None:
        self.label = label
        self.log = log

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        self.log.append(f"{self.label}>{request.tool_call['name']}")
        result = execute(request)
        self.log.append(f"{self.label}<{request.tool_call['name']}")
        return result

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        self.log.append(f"{self.label}>{request.tool_call['name']}")
        result = await execute(request)
        self.log.append(f"{self.label}<{request.tool_call['name']}")
        return result


class Refuser:
    """Answers calls to refused tools with an error result, without running them."""

    def __init__(self, refused: set[str]) -> None:
        self.refused = refused

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        call = request.tool_call
        if call["name"] not in self.refused:
            return None
        return ToolMessage(
            content=f"{call['name']} is not allowed here",
            tool_call_id=call["id"],
            name=call["name"],
            status="error",
        )

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        return self._refusal(request) or execute(request)

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        return self._refusal(request) or await execute(request)


class Raiser:
    """Fails every call from inside the chain."""

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        raise RuntimeError("policy store unreachable")

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        raise RuntimeError("policy store unreachable")


def _calls(*names: str) -> AIMessage:
    args: dict[str, dict[str, Any]] = {"add": {"a": 2, "b": 3}}
    return AIMessage(
        content="",
        tool_calls=[
            {"name": name, "args": args.get(name, {}), "id": f"call-{i}"}
            for i, name in enumerate(names)
        ],
    )


def _graph(wrappers: Sequence[ToolWrapper]) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("tools", tools_node(TOOLS, wrappers))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    return builder.compile()


async def _run(wrappers: Sequence[ToolWrapper], calls: AIMessage, mode: str) -> list[ToolMessage]:
    RAN.clear()
    graph = _graph(wrappers)
    payload = {"messages": [calls]}
    state = graph.invoke(payload) if mode == "sync" else await graph.ainvoke(payload)
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    return sorted(results, key=lambda m: m.tool_call_id)


MODES = pytest.mark.parametrize("mode", ["sync", "async"])


@MODES
async def test_without_wrappers_a_failing_tool_comes_back_as_an_error(mode: str) -> None:
    added, failed = await _run([], _calls("add", "broken"), mode)
    assert (added.status, added.content) == ("success", "5")
    assert failed.status == "error"
    assert "the disk is on fire" in failed.text


@MODES
async def test_a_wrapper_sees_each_call_and_the_first_is_outermost(mode: str) -> None:
    log: list[str] = []
    chain = [Recorder("outer", log), Recorder("inner", log)]
    (added,) = await _run(chain, _calls("add"), mode)
    assert added.content == "5"
    assert log == ["outer>add", "inner>add", "inner<add", "outer<add"]

    log.clear()
    await _run(chain, _calls("add", "broken"), mode)
    assert sorted(entry for entry in log if entry.startswith("outer>")) == [
        "outer>add",
        "outer>broken",
    ]


@MODES
async def test_a_wrapper_turns_a_refused_call_into_an_error_without_running_it(
    mode: str,
) -> None:
    added, refused = await _run(
        [Refuser({"delete_everything"})], _calls("add", "delete_everything"), mode
    )
    assert added.status == "success"
    assert refused.status == "error"
    assert refused.content == "delete_everything is not allowed here"
    assert RAN == ["add"]


@MODES
async def test_an_exception_in_a_wrapper_comes_back_as_an_error(mode: str) -> None:
    (result,) = await _run([Raiser()], _calls("add"), mode)
    assert result.status == "error"
    assert "policy store unreachable" in result.text
    assert RAN == []


def test_the_tools_package_exports_the_builtin_history_tool() -> None:
    from ctxgraph.nodes.tools.history import read_history_tool as defined

    assert defined is read_history_tool
    assert read_history_tool().name == "read_history"
