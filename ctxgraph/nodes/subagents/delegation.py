"""Builds what a graph with subagents adds: the child graphs, the router and the node."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph

from ctxgraph.nodes.offload.read_tools import grep_artifact_tool, read_artifact_tool
from ctxgraph.nodes.offload.results import ResultOffloader
from ctxgraph.nodes.paired_node import paired_node
from ctxgraph.nodes.subagents.child import (
    ChildModel,
    ChildState,
    route_after_child_model,
    route_start,
)
from ctxgraph.nodes.subagents.node import Child, SubagentNode
from ctxgraph.nodes.subagents.route import SUBAGENT_NODE, SubagentRouter
from ctxgraph.nodes.subagents.tool import TASK_TOOL
from ctxgraph.nodes.tools import tools_node
from ctxgraph.state.context import Context
from ctxgraph.state.settings import Settings
from ctxgraph.state.subagents import GENERAL_PURPOSE, SubagentSpec, general_purpose


@dataclass(frozen=True)
class Delegation:
    """The parent graph's part of delegation: the router after its model, and its node."""

    router: SubagentRouter
    node: SubagentNode


def subagent_specs(
    specs: Sequence[SubagentSpec], tools: Sequence[BaseTool], settings: Settings
) -> tuple[SubagentSpec, ...]:
    """``specs``, with the general-purpose subagent first unless disabled or given.

    Raises ``ValueError`` for two specs of one name.
    """
    chosen = list(specs)
    names = [spec.name for spec in chosen]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"subagent names must be unique; {duplicates} appear more than once")
    if settings.subagent_general_purpose and GENERAL_PURPOSE not in names:
        chosen.insert(0, general_purpose([t for t in tools if t.name != TASK_TOOL]))
    return tuple(chosen)


def _child_tools(spec: SubagentSpec, extra: Sequence[BaseTool]) -> list[BaseTool]:
    """The spec's tools, the artifact readers (reading the root thread's artifacts), ``extra``."""
    chosen = [t for t in spec.tools if t.name != TASK_TOOL]
    names = {t.name for t in chosen}
    for tool in (read_artifact_tool(), grep_artifact_tool(), *extra):
        if tool.name not in names:
            chosen.append(tool)
            names.add(tool.name)
    return chosen


def _child_graph(
    spec: SubagentSpec,
    main: BaseChatModel,
    settings: Settings,
    delegation: tuple[BaseTool, SubagentRouter, SubagentNode] | None,
) -> Child:
    """One subagent type's graph: model and tools in a loop, and ``task`` when it may delegate."""
    model = spec.model or main
    tools = _child_tools(spec, [delegation[0]] if delegation else [])
    step = ChildModel(
        model,
        tools,
        delegates=delegation is not None,
        text_tool_calls=settings.text_tool_calls,
    )
    builder: StateGraph[ChildState, Context, ChildState, ChildState] = StateGraph(
        ChildState, context_schema=Context
    )
    builder.add_node("model", paired_node(step.invoke, step.ainvoke, name="model"))
    builder.add_node("tools", tools_node(tools, [ResultOffloader(model, settings)]))
    builder.add_conditional_edges(
        START, route_start, {"model": "model", "tools": "tools", "done": END}
    )
    builder.add_edge("tools", "model")
    if delegation is None:
        builder.add_conditional_edges(
            "model", route_after_child_model, {"tools": "tools", "done": END}
        )
    else:
        _, router, node = delegation
        builder.add_node(SUBAGENT_NODE, paired_node(node.invoke, node.ainvoke, name=SUBAGENT_NODE))
        targets: dict[Hashable, str] = {"tools": "tools", "invalid_calls": END, "finish": END}
        builder.add_conditional_edges("model", router, targets)
        builder.add_edge(SUBAGENT_NODE, "model")
    return Child(spec, builder.compile(name=f"subagent-{spec.name}"))


def delegated_specs(
    specs: Sequence[SubagentSpec] | bool, tools: Sequence[BaseTool], settings: Settings
) -> tuple[SubagentSpec, ...] | None:
    """The subagents ``specs`` delegate to (None without delegation).

    ``specs=True`` means the general-purpose subagent alone; ``False`` or ``()`` means no
    delegation. ``tools`` are the caller's tools, which the general-purpose subagent gets.
    Raises ``ValueError`` when nothing is left to delegate to.
    """
    if specs is False or (not isinstance(specs, bool) and not specs):
        return None
    chosen = subagent_specs(() if specs is True else specs, tools, settings)
    if not chosen:
        raise ValueError(
            "subagents=True asks for the general-purpose subagent, but "
            "Settings.subagent_general_purpose is False; pass SubagentSpec(...) instances"
        )
    return chosen


def build_delegation(
    specs: Sequence[SubagentSpec] | bool,
    main: BaseChatModel,
    tools: Sequence[BaseTool],
    settings: Settings,
    tool: BaseTool,
) -> Delegation | None:
    """The router and node of ``tool`` (the ``task`` tool) for ``specs`` (see ``delegated_specs``).

    Children nest ``settings.subagent_max_depth`` levels: a child of the last level has
    no ``task`` tool.
    """
    chosen = delegated_specs(specs, tools, settings)
    if chosen is None:
        return None
    level: tuple[BaseTool, SubagentRouter, SubagentNode] | None = None
    for _ in range(settings.subagent_max_depth):
        children = {spec.name: _child_graph(spec, main, settings, level) for spec in chosen}
        level = (tool, SubagentRouter(settings), SubagentNode(children, settings))
    assert level is not None
    return Delegation(router=level[1], node=level[2])
