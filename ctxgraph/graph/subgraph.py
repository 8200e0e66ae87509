"""``as_subgraph``: ctxgraph as one node of a parent graph, with its own state per thread.

The child graph is compiled with ``checkpointer=True``: under the parent's checkpointer it
keeps one state per parent thread, in the checkpoint namespace named after the parent's
node, so its summary, compaction mark and window survive between parent turns. The node
maps messages both ways:

- In: only the parent messages that come after the last one the child still holds (the
  new user turn and anything other parent nodes added since). Messages the child has
  already seen, folded ones included, are never sent to it again.
- Out: a ``RemoveMessage`` for every parent message that is not in the child's window
  after the turn (the ones compaction folded into the summary and archived), plus the
  child's new and changed messages. With the ``add_messages`` reducer the parent's
  ``messages`` then equal the child's window: they stay bounded by the compaction
  triggers, and the archive in the Store holds the rest.

LangGraph finds the child through the node function's closure, so the parent's state
methods reach it by namespace, e.g. ``parent.get_state({"configurable": {"thread_id": t,
"checkpoint_ns": "assistant"}})`` for a node named ``assistant``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, cast

from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.runtime import get_runtime
from langgraph.types import StateSnapshot

from ctxgraph.graph.builder import Graph, create_builder
from ctxgraph.graph.input_check import attach_input_check
from ctxgraph.graph.seams import PART_KEYWORDS, old_keywords, with_old_parts
from ctxgraph.nodes.part import Part
from ctxgraph.nodes.tools.wrappers import ToolWrapper
from ctxgraph.state.graph_state import InputState
from ctxgraph.state.models import Models
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import MessageCount

SubgraphNode = RunnableLambda[Any, dict[str, list[BaseMessage]]]
"""The node ``as_subgraph`` returns: parent state in, a ``messages`` update out."""


class SubgraphSetupError(ValueError):
    """The parent graph cannot host ctxgraph; the message says what to pass to its compile."""


def as_subgraph(
    *,
    models: Models | None = None,
    tools: Sequence[BaseTool] = (),
    settings: Settings | None = None,
    name: str = "ctxgraph",
    parts: Sequence[Part] | None = None,
    token_counter: MessageCount | None = None,
    tool_wrappers: Sequence[ToolWrapper] = (),
    **deprecated: Any,
) -> SubgraphNode:
    """Return ctxgraph as a node for a parent graph with ``add_messages`` ``messages``.

    Compile the parent with a checkpointer and a Store; the first run raises
    ``SubgraphSetupError`` naming the one that is missing.

    Args:
        models: The chat models; None reads them from the environment, as
            ``build_graph`` does.
        tools: The caller's tools.
        settings: The child graph's settings (None is ``Settings()``).
        name: Names the node's runs in traces; the checkpoint namespace is the node name
            given to ``add_node``.
        parts: Parts replacing the built-in ones of their kind, and the caller's own, as
            in ``create_builder``.
        token_counter: Counts the tokens of a list of messages, as in ``create_builder``.
        tool_wrappers: Wrap every tool call of the child, the first outermost, as in
            ``create_builder``.
        **deprecated: ``summary_prompt``, ``extraction_prompt``, ``ranker`` and
            ``subagents`` still work until 0.3.0, with a ``DeprecationWarning``
            naming the part that takes each now.

    Returns:
        A runnable node (sync and async) taking the parent's state and returning its
        ``messages`` update.

    Raises:
        ModelConfigError: ``models=None`` and the environment configures no usable model.
        PromptTemplateError: A summary or extraction prompt cannot be filled.
        TypeError: ``token_counter``, a ranker or a tool wrapper has the wrong shape.

    """
    old = old_keywords(deprecated, PART_KEYWORDS, "as_subgraph")
    child = compile_child(
        models=models,
        tools=tools,
        settings=settings,
        parts=with_old_parts(parts, old),
        token_counter=token_counter,
        tool_wrappers=tool_wrappers,
    )

    def run(state: Any, config: RunnableConfig) -> dict[str, list[BaseMessage]]:
        return sync_turn(child, state, config)

    async def arun(state: Any, config: RunnableConfig) -> dict[str, list[BaseMessage]]:
        return await async_turn(child, state, config)

    return RunnableLambda(run, afunc=arun, name=name)


def compile_child(
    *,
    models: Models | None = None,
    tools: Sequence[BaseTool] = (),
    settings: Settings | None = None,
    parts: Sequence[Part] | None = None,
    token_counter: MessageCount | None = None,
    tool_wrappers: Sequence[ToolWrapper] = (),
) -> Graph:
    """The ctxgraph graph compiled to keep its own state under a parent's checkpointer.

    The arguments are those of ``as_subgraph`` (see ``create_builder``).
    """
    builder = create_builder(
        models=models if models is not None else Models.from_env(os.environ),
        tools=tools,
        settings=settings,
        parts=parts,
        token_counter=token_counter,
        tool_wrappers=tool_wrappers,
    )
    child = builder.compile(checkpointer=True, name="ctxgraph")
    attach_input_check(child)
    return child


def sync_turn(child: Graph, state: Any, config: RunnableConfig) -> dict[str, list[BaseMessage]]:
    """One parent step: send the child what it has not seen, return the parent's update.

    With nothing new, the child runs only to finish a run that stopped part-way (the
    parent retrying a failed step); otherwise the parent just gets the child's window.
    """
    _require_parent_store()
    parent = parent_messages(state)
    try:
        snapshot = child.get_state(config)
    except ValueError as error:
        raise _missing_checkpointer(error) from error
    window = child_window(snapshot)
    new = unseen(parent, window)
    if new:
        window = child_window(child.invoke(_input(new), config))
    elif snapshot.next:
        # A run that stopped part-way (a failed step): carry on from the child's checkpoint.
        window = child_window(child.invoke(None, config))
    return {"messages": parent_update(parent, window)}


async def async_turn(
    child: Graph, state: Any, config: RunnableConfig
) -> dict[str, list[BaseMessage]]:
    """Async ``sync_turn``."""
    _require_parent_store()
    parent = parent_messages(state)
    try:
        snapshot = await child.aget_state(config)
    except ValueError as error:
        raise _missing_checkpointer(error) from error
    window = child_window(snapshot)
    new = unseen(parent, window)
    if new:
        window = child_window(await child.ainvoke(_input(new), config))
    elif snapshot.next:
        window = child_window(await child.ainvoke(None, config))
    return {"messages": parent_update(parent, window)}


def _input(messages: list[BaseMessage]) -> InputState:
    # Parent messages are message objects (checked by parent_messages), as AnyMessage lists.
    return {"messages": cast(list[AnyMessage], messages)}


def parent_messages(state: Any) -> list[BaseMessage]:
    """The parent's ``messages``; each must have an id, as ``add_messages`` gives them."""
    value = state.get("messages") if isinstance(state, Mapping) else state.messages
    messages = list(value or [])
    for message in messages:
        if not isinstance(message, BaseMessage) or not message.id:
            raise ValueError(
                "ctxgraph as a subgraph needs the parent's 'messages' to be messages with ids, "
                "as the add_messages reducer (MessagesState) keeps them; got "
                f"{message!r:.200}"
            )
    return messages


def child_window(values: StateSnapshot | Mapping[str, Any]) -> list[BaseMessage]:
    """The child's working window, from its state snapshot or its output."""
    if isinstance(values, StateSnapshot):
        values = values.values
    return list(values.get("messages") or [])


def unseen(parent: Sequence[BaseMessage], window: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The parent messages after the last one the child holds (all of them if it holds none).

    Everything before that point the child has seen: it is in the window, or compaction
    folded it into the summary and the archive.
    """
    held = {message.id for message in window}
    last = max((i for i, message in enumerate(parent) if message.id in held), default=-1)
    return list(parent[last + 1 :])


def parent_update(
    parent: Sequence[BaseMessage], window: Sequence[BaseMessage]
) -> list[BaseMessage]:
    """What makes the parent's ``messages`` equal ``window`` under ``add_messages``.

    A removal for each parent message the window no longer holds, then each window
    message the parent lacks or holds in an older form (same id, other content).
    """
    kept = {message.id for message in window}
    current = {message.id: message for message in parent}
    update: list[BaseMessage] = [
        RemoveMessage(id=str(message.id)) for message in parent if message.id not in kept
    ]
    update.extend(message for message in window if current.get(message.id) != message)
    return update


def _require_parent_store() -> None:
    if get_runtime().store is None:
        raise SubgraphSetupError(
            "ctxgraph runs as a subgraph here, and the parent graph has no Store: compaction "
            "archives the messages it folds in the parent's Store, so compile the parent "
            "with one, e.g. parent.compile(checkpointer=..., store=...)"
        )


def _missing_checkpointer(error: ValueError) -> SubgraphSetupError:
    return SubgraphSetupError(
        "ctxgraph runs as a subgraph here and keeps its summary, compaction mark and window "
        "in the parent's checkpointer, and it cannot read them "
        f"({error}): compile the parent with parent.compile(checkpointer=..., store=...) "
        "and run it with config={'configurable': {'thread_id': ...}}"
    )
