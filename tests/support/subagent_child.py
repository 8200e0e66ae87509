"""Runs one delegating turn on the embedded Postgres in its own process, then exits.

Usage: ``python -m tests.support.subagent_child URI THREAD_ID``. The parent model hands
one ``task`` to the ``clerk`` subagent, whose model calls ``lookup_order`` once and then
answers; the parent then answers too. Prints one JSON object (the run's last message and
the task result's ``subagent`` metadata) and exits 0, so the test process can check what
the checkpointer and the Store kept after this process is gone.
"""

from __future__ import annotations

import json
import sys

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from ctxgraph import SubagentsPart
from ctxgraph.graph import build_graph
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.subagents import SubagentSpec
from ctxgraph.store.persistence.connection import open_persistence

USER_ID = "subagent-user"
SYSTEM_PROMPT = "You are the clerk. Look orders up, then report their status."
TASK_TEXT = "Find the shipping status of order A-17."
EXPECTED = "One line: the order id and its status."
CHILD_TASK_TEXT = f"{TASK_TEXT}\n\nExpected output:\n{EXPECTED}"
"""The child's user message: the description, then the expected output."""
LOOKUP_CALL_ID = "lookup-1"
LOOKUP_RESULT = "order A-17: shipped on 2024-03-02"
CHILD_ANSWER = "Order A-17 shipped on 2024-03-02."
PARENT_ANSWER = "The clerk says order A-17 has shipped."
TASK_CALL_ID = "task-1"
SETTINGS = Settings(memory_extraction="off", memory_mode="off")


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order's shipping status."""
    return LOOKUP_RESULT if order_id == "A-17" else f"order {order_id}: unknown"


def parent_reply(messages: list[BaseMessage]) -> AIMessage:
    """Delegate on the user's message; answer once the task result is there."""
    if isinstance(messages[-1], ToolMessage):
        return AIMessage(content=PARENT_ANSWER)
    call = {
        "name": "task",
        "args": {"description": TASK_TEXT, "subagent_type": "clerk", "expected_output": EXPECTED},
        "id": TASK_CALL_ID,
    }
    return AIMessage(content="", tool_calls=[call])


def child_model() -> ScriptedChatModel:
    """One lookup, then the answer."""
    lookup = {"name": "lookup_order", "args": {"order_id": "A-17"}, "id": LOOKUP_CALL_ID}
    return ScriptedChatModel(script=[AIMessage(content="", tool_calls=[lookup]), CHILD_ANSWER])


def main(argv: list[str]) -> int:
    uri, thread_id = argv
    spec = SubagentSpec(
        name="clerk",
        description="Looks orders up.",
        system_prompt=SYSTEM_PROMPT,
        tools=(lookup_order,),
        model=child_model(),
    )
    with open_persistence(uri) as persistence:
        graph = build_graph(
            checkpointer=persistence.checkpointer,
            store=persistence.store,
            models=Models(main=ScriptedChatModel(responder=parent_reply)),
            settings=SETTINGS,
            parts=[SubagentsPart([spec])],
        )
        out = graph.invoke(
            {"messages": [HumanMessage("Where is order A-17?")]},
            {"configurable": {"thread_id": thread_id}},
            context=Context(user_id=USER_ID),
        )
    result = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    report = {"last": out["messages"][-1].content, "subagent": result.additional_kwargs["subagent"]}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
