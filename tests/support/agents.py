"""Helpers for tests of ``create_agent`` agents with ctxgraph's middleware and scripted models.

A session agent answers each user turn with one tool call, then a short reply, so every
turn adds four messages (user, call, result, reply) whose ids the test knows: ``h<n>``,
``a<n>``, the result of call ``c<n>``, and ``r<n>``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from ctxgraph.middleware import ctxgraph_middleware
from ctxgraph.nodes.memory.extract import EXTRACTION_SYSTEM
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_memory, demo_summary
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.persistence.archive import ThreadArchive, record_messages
from tests.support.scripted import is_summary_request, prompt_text, tool_call

USER_ID = re.compile(r"h(\d+)")
"""The id of a session's user turn."""


@tool
def lookup(order_id: str) -> str:
    """Look up an order."""
    return f"Order {order_id}: shipped from the north dock, two parcels, signed on delivery."


def turn_number(request: Sequence[BaseMessage]) -> int:
    """The number of the request's latest user turn (its text says ``turn <n>``)."""
    for message in reversed(request):
        found = USER_ID.fullmatch(str(message.id)) if isinstance(message, HumanMessage) else None
        if found:
            return int(found.group(1))
    raise AssertionError("the request holds no user turn")


def session_reply(request: list[BaseMessage]) -> AIMessage:
    """One ``lookup`` call per user turn, then a short reply once its result is in."""
    n = turn_number(request)
    if isinstance(request[-1], ToolMessage):
        return AIMessage(f"Order A-{n} has shipped.", id=f"r{n}")
    return tool_call("lookup", {"order_id": f"A-{n}"}, f"c{n}", id=f"a{n}")


def every_role(request: list[BaseMessage]) -> AIMessage:
    """A session agent that also writes the summaries and memory extractions it is asked for.

    For agents without ``Models``, whose own model plays every role.
    """
    if is_summary_request(request):
        return demo_summary(prompt_text(request))
    if isinstance(request[0], SystemMessage) and request[0].text == EXTRACTION_SYSTEM:
        return demo_memory(prompt_text(request))
    return session_reply(request)


def user_turn(n: int, text: str | None = None) -> dict[str, Any]:
    """The input of user turn ``n``."""
    said = text or f"Where is order A-{n}? This is turn {n}."
    return {"messages": [HumanMessage(said, id=f"h{n}")]}


def session_agent(
    main: ScriptedChatModel,
    settings: Settings,
    checkpointer: BaseCheckpointSaver[Any],
    store: BaseStore,
    *,
    models: Models | None = None,
    tools: Sequence[BaseTool] = (lookup,),
) -> Any:
    """A ``create_agent`` agent of ``main`` with ``ctxgraph_middleware`` (a fresh host).

    ``models`` set the summary and memory roles; without them ``main`` plays every role
    and the host learns it at its first call, as when an agent passes no ``Models``.
    """
    return create_agent(
        main,
        list(tools),
        middleware=ctxgraph_middleware(models=models, settings=settings),
        checkpointer=checkpointer,
        store=store,
        context_schema=Context,
    )


def config(thread_id: str) -> dict[str, Any]:
    """The run config of ``thread_id``."""
    return {"configurable": {"thread_id": thread_id}}


def provider_problems(request: Sequence[BaseMessage]) -> list[str]:
    """What a chat provider would reject in ``request``'s tool calls and results.

    Every assistant tool call must be answered by a tool result right after its message
    (the results of one message together, before anything else), and no tool result may
    come without the call it answers.
    """
    problems: list[str] = []
    open_calls: set[str] = set()
    for index, message in enumerate(request):
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in open_calls:
                problems.append(f"message {index}: result of unknown call {message.tool_call_id}")
            open_calls.discard(message.tool_call_id)
            continue
        if open_calls:
            problems.append(f"message {index}: calls {sorted(open_calls)} left unanswered")
            open_calls = set()
        if isinstance(message, AIMessage):
            open_calls = {str(call["id"]) for call in message.tool_calls}
    if open_calls:
        problems.append(f"calls {sorted(open_calls)} left unanswered at the end")
    return problems


def archived(store: BaseStore, thread_id: str) -> list[BaseMessage]:
    """Every message the thread's archive holds, in version order."""
    records = ThreadArchive(store, thread_id).records()
    return [message for record in records for message in record_messages(record)]


def message_key(message: BaseMessage) -> str:
    """A name for a session message: its id, or ``result:<call id>`` for a tool result."""
    if isinstance(message, ToolMessage):
        return f"result:{message.tool_call_id}"
    return str(message.id)


def session_keys(turns: range) -> list[str]:
    """The names (``message_key``) of the messages ``turns`` of a session agent add."""
    return [key for n in turns for key in (f"h{n}", f"a{n}", f"result:c{n}", f"r{n}")]
