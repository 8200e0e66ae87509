"""Wires the ctxgraph ``StateGraph`` from an ``Assembly``'s nodes, and compiles it."""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore

from ctxgraph.graph.assembly import Assembly, ordered_parts, part_tools
from ctxgraph.graph.input_check import attach_input_check
from ctxgraph.graph.seams import PART_KEYWORDS, ROOT_KEYWORDS, old_keywords, with_old_parts
from ctxgraph.nodes.compaction.commit import ThreadHead, checkpoint_head
from ctxgraph.nodes.compaction.job_queue import JobQueue
from ctxgraph.nodes.compaction.node import CompactNode
from ctxgraph.nodes.invalid_calls import invalid_calls_node
from ctxgraph.nodes.paired_node import paired_node as _node
from ctxgraph.nodes.part import Part, PartSetup
from ctxgraph.nodes.parts import CompactionPart, SkillsPart, SubagentsPart
from ctxgraph.nodes.routing import AfterTools, route_after_model
from ctxgraph.nodes.skills.sources import SkillSources
from ctxgraph.nodes.subagents.route import SUBAGENT_NODE
from ctxgraph.nodes.tools import tools_node
from ctxgraph.nodes.tools.wrappers import ToolWrapper
from ctxgraph.state.context import Context
from ctxgraph.state.graph_state import AgentState, InputState, OutputState
from ctxgraph.state.models import Models
from ctxgraph.state.settings import Settings
from ctxgraph.state.subagents import SubagentSpec
from ctxgraph.state.tokens import MessageCount, TokenCounter

Graph = CompiledStateGraph[AgentState, Context, InputState, OutputState]
Builder = StateGraph[AgentState, Context, InputState, OutputState]


def create_builder(
    *,
    models: Models,
    tools: Sequence[BaseTool] = (),
    settings: Settings | None = None,
    head: ThreadHead | None = None,
    parts: Sequence[Part] | None = None,
    tool_wrappers: Sequence[ToolWrapper] = (),
    token_counter: MessageCount | None = None,
    compaction_queue: JobQueue | None = None,
    **deprecated: Any,
) -> Builder:
    """Return the uncompiled graph, so callers can compile it with their own persistence.

    With ``settings.memory_extraction == "off"`` the graph has no extraction nodes (no
    ``flush``, no ``extract_memory``), and with ``settings.memory_mode == "off"`` no
    ``load_memory`` node and no ``memory_search`` tool; otherwise per-run settings choose.
    Compile it with ``compile_graph`` to get the input checks ``build_graph`` attaches.
    ``ctxgraph.CtxGraph`` builds every served graph from one set of these arguments.

    Args:
        models: The chat models: ``main``, and ``summary`` and ``memory`` (each falls
            back to ``main``).
        tools: The caller's tools, bound to the main model before the built-in ones.
        settings: The graph's settings; a run's ``Context.settings`` override the fields
            they set. None is ``Settings()``.
        head: Reads a thread's committed compaction mark and window, so a compaction
            commits only if the thread has not moved on while it ran; pass
            ``checkpoint_head(saver)`` when compiling with your own checkpointer.
        parts: Parts replacing the built-in ones of their kind (``CompactionPart(
            summary_prompt=...)``, ``MemoryPart(extraction_prompt=..., ranker=...)``,
            ``SubagentsPart(specs)``, ``SkillsPart()``, ``OffloadPart()``) and the
            caller's own parts, which follow the built-in ones; a part's ``state`` keys
            join the thread's state. None is the built-in parts.
        tool_wrappers: ``ToolWrapper``s around every call of the ``tools`` node, the
            first outermost, all outside the built-in ones: the skill policy gate, then
            the result offloader. So a wrapper sees each call before the policy refuses
            it, and the result as the model will see it (a stub once offloaded).
        token_counter: Counts the tokens of a list of messages (e.g.
            ``count_tokens_approximately``) for every window and budget decision: the
            triggers, the summary chunks, the memory budget, the result offloading and
            the ``memory_search`` result cap. None counts with the offline tiktoken
            encoding.
        compaction_queue: Receives the background compaction jobs of async runs (on a
            LangGraph server, ``ServerJobQueue()`` queues them as ``compaction_worker``
            runs); without it a job is a daemon thread of the process.
        **deprecated: ``summary_prompt``, ``extraction_prompt``, ``ranker`` and
            ``subagents`` still work until 0.3.0, with a ``DeprecationWarning``
            naming the part that takes each now.

    Returns:
        The ``StateGraph`` builder, not compiled.

    Raises:
        PromptTemplateError: A summary or extraction prompt cannot be filled.
        TypeError: ``token_counter``, a ranker or a tool wrapper has the wrong shape, or
            an unknown keyword was given.
        ValueError: Two tools share a name, or two parts are of one built-in kind.
        SettingsError: The settings are invalid together.

    """
    settings = settings or Settings()
    old = old_keywords(deprecated, PART_KEYWORDS, "create_builder")
    chosen = ordered_parts(with_old_parts(parts, old), settings)
    built = Assembly(
        models,
        tools,
        settings,
        chosen,
        tool_wrappers=tool_wrappers,
        token_counter=token_counter,
        head=head,
        queue=compaction_queue,
    )
    compact, model, memory, loader = built.compact, built.model, built.memory, built.loader
    builder: Builder = StateGraph(
        built.state, context_schema=Context, input_schema=InputState, output_schema=OutputState
    )
    builder.add_node("compact", _node(compact.invoke, compact.ainvoke, name="compact"))
    builder.add_node("model", _node(model.invoke, model.ainvoke, name="model"))
    builder.add_node("tools", tools_node(built.tools, built.wrappers))
    builder.add_node("invalid_calls", invalid_calls_node)
    builder.add_edge("compact", "model")
    if memory is not None:
        builder.add_node("flush", _node(memory.flush, memory.aflush, name="flush"))
        builder.add_node(
            "extract_memory",
            _node(memory.extract_turn, memory.aextract_turn, name="extract_memory"),
        )
        builder.add_edge("flush", "compact")
        builder.add_edge("extract_memory", END)
    before_model: dict[Hashable, str] = {
        "compact": "compact" if memory is None else "flush",
        "model": "model",
    }
    if loader is not None:
        builder.add_node("load_memory", _node(loader.load, loader.aload, name="load_memory"))
        builder.add_edge(START, "load_memory")
        builder.add_conditional_edges("load_memory", compact.route, before_model)
    else:
        builder.add_conditional_edges(START, compact.route, before_model)
    after_model: dict[Hashable, str] = {
        "tools": "tools",
        "invalid_calls": "invalid_calls",
        "finish": END if memory is None else "extract_memory",
    }
    after_tools = AfterTools(compact.route)
    after_tools_targets = {**before_model, "invalid_calls": "invalid_calls"}
    delegation = built.delegation
    if delegation is None:
        builder.add_conditional_edges("model", route_after_model, after_model)
    else:
        node = delegation.node
        builder.add_node(SUBAGENT_NODE, _node(node.invoke, node.ainvoke, name=SUBAGENT_NODE))
        builder.add_conditional_edges("model", delegation.router, after_model)
        builder.add_conditional_edges(SUBAGENT_NODE, after_tools, after_tools_targets)
    builder.add_conditional_edges("tools", after_tools, after_tools_targets)
    builder.add_conditional_edges("invalid_calls", compact.route, before_model)
    return builder


def graph_tools(
    tools: Sequence[BaseTool], settings: Settings, skills: SkillSources | None
) -> list[BaseTool]:
    """Every tool a graph of ``tools`` and ``settings`` may bind, in binding order.

    ``tools``, the skill tools (given ``skills``), ``read_history``, the artifact readers,
    and ``memory_search`` unless ``settings.memory_mode`` is off. A request binds a gated
    tool only once it can help (``ctxgraph.nodes.tools.binding``).
    """
    chosen = ordered_parts([SkillsPart(skills)] if skills is not None else None, settings)
    caller = tuple(tools)
    return part_tools(chosen, PartSetup(None, settings, TokenCounter(), caller, caller))


def compaction_node(
    *,
    models: Models,
    tools: Sequence[BaseTool] = (),
    settings: Settings | None = None,
    summary_prompt: str | None = None,
    token_counter: MessageCount | None = None,
    subagents: Sequence[SubagentSpec] | bool = (),
) -> CompactNode:
    """The ``compact`` node a graph built with these arguments has, on its own.

    It measures requests exactly as that graph does, so tools outside a run (the
    ``ctxgraph threads compact`` command) split and check a thread as a turn would.
    ``summary_prompt`` is a ``CompactionPart``'s, ``token_counter`` that of ``create_builder``.
    """
    settings = settings or Settings()
    chosen = ordered_parts([CompactionPart(summary_prompt), SubagentsPart(subagents)], settings)
    return Assembly(models, tools, settings, chosen, token_counter=token_counter).compact


def build_graph(
    *,
    checkpointer: BaseCheckpointSaver[str] | None = None,
    store: BaseStore | None = None,
    models: Models | None = None,
    tools: Sequence[BaseTool] = (),
    settings: Settings | None = None,
    parts: Sequence[Part] | None = None,
    **deprecated: Any,
) -> Graph:
    """Build and compile the graph, with input checks attached.

    A ``checkpointer`` needs a ``store`` too (see ``compile_graph``); with neither, the
    graph gets both from a LangGraph server or from a parent graph at run time. To run
    inside a parent graph, use ``ctxgraph.graph.as_subgraph``. To build the workers with
    the same seams, use ``ctxgraph.CtxGraph``.

    Args:
        checkpointer: Any LangGraph checkpointer; the threads' state lives there.
        store: Any LangGraph Store: long-term memory, the archive of folded messages and
            the offloaded artifacts live there. Required with ``checkpointer``.
        models: The chat models; None reads them from the environment
            (``Models.from_env(os.environ)``).
        tools: The caller's tools.
        settings: The graph's settings (None is ``Settings()``).
        parts: Parts replacing the built-in ones of their kind, and the caller's own, as
            at ``create_builder``.
        **deprecated: The keywords ``build_graph`` took before (``summary_prompt``,
            ``extraction_prompt``, ``ranker``, ``subagents``, ``token_counter``,
            ``tool_wrappers``, ``compaction_queue``) still work until 0.3.0, with a
            ``DeprecationWarning`` naming the replacement of each.

    Returns:
        The compiled graph; run it with ``context=Context(user_id=...)``. With the default
        ``memory_extraction="background"`` a run does not wait for the memory model; call
        ``ctxgraph.graph.wait_for_memory()`` (or ``await_memory()``) before the process
        ends or the Store closes.

    Raises:
        ValueError: A ``checkpointer`` without a ``store``, or two tools share a name.
        ModelConfigError: ``models=None`` and the environment configures no usable model.
        PromptTemplateError: A summary or extraction prompt cannot be filled.
        TypeError: A token counter, ranker or tool wrapper has the wrong shape, or an
            unknown keyword was given.

    """
    old = old_keywords(deprecated, {**PART_KEYWORDS, **ROOT_KEYWORDS}, "build_graph")
    check_persistence(checkpointer, store)
    builder = create_builder(
        models=models if models is not None else Models.from_env(os.environ),
        tools=tools,
        settings=settings,
        head=checkpoint_head(checkpointer),
        parts=with_old_parts(parts, {k: v for k, v in old.items() if k in PART_KEYWORDS}),
        tool_wrappers=old.get("tool_wrappers", ()),
        token_counter=old.get("token_counter"),
        compaction_queue=old.get("compaction_queue"),
    )
    return compile_graph(builder, checkpointer=checkpointer, store=store)


def compile_graph(
    builder: Builder,
    *,
    checkpointer: BaseCheckpointSaver[str] | None = None,
    store: BaseStore | None = None,
) -> Graph:
    """Compile a builder from ``create_builder`` with input checks attached.

    Raises ``ValueError`` for a ``checkpointer`` without a ``store`` (see
    ``check_persistence``).
    """
    check_persistence(checkpointer, store)
    compiled = builder.compile(checkpointer=checkpointer, store=store, name="ctxgraph")
    attach_input_check(compiled)
    return compiled


def check_persistence(
    checkpointer: BaseCheckpointSaver[str] | None, store: BaseStore | None
) -> None:
    """Refuse a checkpointer without a Store, before anything runs.

    Compaction archives the messages it folds in the Store, and any thread long enough
    can compact (a run's ``Context.settings`` can lower the triggers). A graph compiled
    with its own checkpointer runs as a top-level graph, where nothing but ``store=`` can
    supply one, so its first compaction would fail. A graph compiled with neither gets
    both at run time, from a LangGraph server or from a parent graph, so it is not
    checked here; if a run still has no Store, compaction raises ``CompactionError``
    naming the fix.
    """
    if checkpointer is not None and store is None:
        raise ValueError(
            f"a checkpointer ({type(checkpointer).__name__}) was given without store=: "
            "compaction archives the messages it folds in a LangGraph Store, and a graph "
            "with its own checkpointer gets no Store from anywhere else. Pass store= (the "
            "same database's, e.g. open_persistence().store, or InMemoryStore() in tests); "
            "to run ctxgraph inside a parent graph, use ctxgraph.graph.as_subgraph(...) and "
            "compile the parent with checkpointer= and store="
        )
