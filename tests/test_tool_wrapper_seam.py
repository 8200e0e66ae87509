"""``CtxGraph(tool_wrappers=...)``: the caller's wrappers run outside the built-in ones.

The order, first outermost: the caller's wrappers as given, then the skill policy gate,
then the result offloader next to the tool. So a caller's wrapper sees every call before
the policy refuses it, and every result as the model will see it (a stub once offloaded).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.store.memory import InMemoryStore

from ctxgraph import Context, CtxGraph, Models, Settings
from ctxgraph.graph import as_subgraph
from ctxgraph.graph.builder import Graph, create_builder
from ctxgraph.nodes.offload.refs import OFFLOAD_KEY
from ctxgraph.nodes.tools.wrappers import AsyncExecute, Execute, ToolResult, ToolWrapper
from ctxgraph.state.scripted_model import ScriptedChatModel

CONTEXT = Context(user_id="wrapper-user")
WRITES: list[str] = []


@tool
def write_file(path: str, text: str) -> str:
    """Write a file."""
    WRITES.append(path)
    return f"wrote {path}"


@tool
def dump_log(lines: int) -> str:
    """Print the last lines of the log."""
    return "\n".join(f"log line {n}: the service answered 200 OK" for n in range(lines))


TOOLS: tuple[BaseTool, ...] = (write_file, dump_log)


@pytest.fixture(autouse=True)
def _no_writes() -> None:
    WRITES.clear()


class RequireSkill:
    """Lets ``tool_name`` run only while the skill ``skill`` is active in the thread."""

    def __init__(self, tool_name: str, skill: str) -> None:
        self.tool_name = tool_name
        self.skill = skill

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        call = request.tool_call
        if call["name"] != self.tool_name:
            return None
        active = {entry["name"] for entry in request.state.get("skill_context") or []}
        if self.skill in active:
            return None
        return ToolMessage(
            content=f"{self.tool_name} needs the {self.skill} skill: load_skill({self.skill!r})",
            tool_call_id=call["id"],
            name=call["name"],
            status="error",
        )

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        return self._refusal(request) or execute(request)

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        return self._refusal(request) or await execute(request)


class Audit:
    """Logs each call on the way in and its result on the way out."""

    def __init__(self, label: str, log: list[str], results: list[ToolResult] | None = None) -> None:
        self.label = label
        self.log = log
        self.results = results

    def _after(self, request: ToolCallRequest, result: ToolResult) -> ToolResult:
        status = result.status if isinstance(result, ToolMessage) else "command"
        self.log.append(f"{self.label}<{request.tool_call['name']}:{status}")
        if self.results is not None:
            self.results.append(result)
        return result

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        self.log.append(f"{self.label}>{request.tool_call['name']}")
        return self._after(request, execute(request))

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        self.log.append(f"{self.label}>{request.tool_call['name']}")
        return self._after(request, await execute(request))


def write_skill(root: Path, name: str, allowed: Sequence[str]) -> None:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: A skill.\nallowed-tools: [{', '.join(allowed)}]\n"
        "---\nDo the thing.\n",
        encoding="utf-8",
    )


def call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def graph_for(main: ScriptedChatModel, wrappers: Sequence[ToolWrapper], **settings: Any) -> Graph:
    values: dict[str, Any] = {"memory_extraction": "off", **settings}
    root = CtxGraph(Models(main=main), Settings(**values), tools=TOOLS, tool_wrappers=wrappers)
    return root.agent(checkpointer=InMemorySaver(), store=InMemoryStore())


async def turn(graph: Graph, text: str, mode: str) -> list[BaseMessage]:
    config = {"configurable": {"thread_id": "t"}}
    payload = {"messages": [HumanMessage(text)]}
    if mode == "sync":
        result = graph.invoke(payload, config, context=CONTEXT)
    else:
        result = await graph.ainvoke(payload, config, context=CONTEXT)
    return list(result["messages"])


def results(messages: Sequence[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


MODES = pytest.mark.parametrize("mode", ["sync", "async"])


@MODES
async def test_a_wrapper_refuses_a_tool_until_its_skill_is_active(
    tmp_path: Path, mode: str
) -> None:
    write_skill(tmp_path, "writer", allowed=["write_file"])
    main = ScriptedChatModel(
        script=[
            call("write_file", {"path": "a.txt", "text": "x"}, "c1"),
            "refused",
            call("load_skill", {"name": "writer"}, "c2"),
            call("write_file", {"path": "b.txt", "text": "x"}, "c3"),
            "written",
        ]
    )
    graph = graph_for(main, [RequireSkill("write_file", "writer")], skills_dirs=(str(tmp_path),))

    first = results(await turn(graph, "write a.txt", mode))
    assert [(m.name, m.status) for m in first] == [("write_file", "error")]
    assert "needs the writer skill" in first[0].text
    assert WRITES == []  # the refused call never ran

    second = results(await turn(graph, "load the writer skill and write b.txt", mode))
    assert [(m.name, m.status) for m in second[-2:]] == [
        ("load_skill", "success"),
        ("write_file", "success"),
    ]
    assert second[-1].text == "wrote b.txt"
    assert WRITES == ["b.txt"]


@MODES
async def test_the_first_wrapper_is_outermost_and_all_wrap_the_built_in_ones(
    tmp_path: Path, mode: str
) -> None:
    # reader allows dump_log only: the policy gate refuses write_file while it is active.
    write_skill(tmp_path, "reader", allowed=["dump_log"])
    main = ScriptedChatModel(
        script=[
            call("load_skill", {"name": "reader"}, "c1"),
            call("write_file", {"path": "a.txt", "text": "x"}, "c2"),
            call("dump_log", {"lines": 400}, "c3"),
            "done",
        ]
    )
    log: list[str] = []
    seen: list[ToolResult] = []
    graph = graph_for(
        main,
        [Audit("outer", log, seen), Audit("inner", log)],
        skills_dirs=(str(tmp_path),),
        offload_tokens=300,
    )
    messages = await turn(graph, "show me the log", mode)

    assert log == [
        "outer>load_skill",
        "inner>load_skill",
        "inner<load_skill:command",
        "outer<load_skill:command",
        # The caller's wrappers see the call the skill policy (inside them) refuses.
        "outer>write_file",
        "inner>write_file",
        "inner<write_file:error",
        "outer<write_file:error",
        "outer>dump_log",
        "inner>dump_log",
        "inner<dump_log:success",
        "outer<dump_log:success",
    ]
    assert WRITES == []
    refused = seen[1]
    assert isinstance(refused, ToolMessage)
    assert "not allowed by the skill tool policy" in refused.text
    # The offloader runs inside: the wrappers see the stub the model sees, not the log.
    stub = seen[2]
    assert isinstance(stub, ToolMessage)
    assert OFFLOAD_KEY in stub.additional_kwargs
    assert "log line 200:" not in stub.text  # the stub keeps only the head and the tail
    assert results(messages)[-1] == stub


def test_wrappers_are_checked_when_the_graph_is_built() -> None:
    class OnlySync:
        def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
            return execute(request)

    with pytest.raises(TypeError, match=r"tool_wrappers\[1\].*lacks awrap"):
        graph_for(ScriptedChatModel(script=[]), [Audit("a", []), OnlySync()])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="takes a sequence"):
        create_builder(models=Models(main=ScriptedChatModel()), tool_wrappers=Audit("a", []))  # type: ignore[arg-type]


def test_as_subgraph_takes_the_wrappers_too() -> None:
    log: list[str] = []
    main = ScriptedChatModel(
        script=[call("write_file", {"path": "s.txt", "text": "x"}, "c1"), "ok"]
    )
    node = as_subgraph(
        models=Models(main=main),
        tools=TOOLS,
        settings=Settings(memory_extraction="off"),
        tool_wrappers=[Audit("audit", log)],
    )
    parent = StateGraph(MessagesState)
    parent.add_node("assistant", node)
    parent.add_edge(START, "assistant")
    parent.add_edge("assistant", END)
    graph = parent.compile(checkpointer=InMemorySaver(), store=InMemoryStore())
    graph.invoke(
        {"messages": [HumanMessage("write s.txt", id="h1")]},
        {"configurable": {"thread_id": "sub"}},
        context=CONTEXT,
    )
    assert log == ["audit>write_file", "audit<write_file:success"]
    assert WRITES == ["s.txt"]
