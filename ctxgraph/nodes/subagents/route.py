"""Routing after the model when it can delegate: one ``Send`` per ``task`` call.

``task`` calls never run in the tools node: each goes to the ``subagent`` node as a task of
its own (so each child gets its own checkpoint namespace and a failure stays its own);
the answer's other calls go to the tools node together. The limits on how many tasks an
answer or a run may start are decided here, where every call of the answer is known.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolCall
from langgraph.runtime import Runtime
from langgraph.types import Send
from typing_extensions import TypedDict

from ctxgraph.nodes.routing import route_after_model
from ctxgraph.nodes.settings import settings_for
from ctxgraph.nodes.subagents.tool import TASK_TOOL
from ctxgraph.state.settings import Settings

SUBAGENT_NODE = "subagent"


class Refusal(TypedDict):
    """Why a ``task`` call is answered without running a child."""

    status: Literal["capped", "failed"]
    stop_reason: str
    message: str


class TaskPayload(TypedDict):
    """What the ``subagent`` node receives for one ``task`` call."""

    call: ToolCall
    refusal: Refusal | None


def _earlier_tasks(window: Sequence[AnyMessage]) -> int:
    """``task`` calls made in this run before its last answer (since the last user message)."""
    count = 0
    for message in reversed(window[:-1]):
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, AIMessage):
            count += sum(1 for call in message.tool_calls if call["name"] == TASK_TOOL)
    return count


def refusals(calls: Sequence[ToolCall], earlier: int, settings: Settings) -> list[Refusal | None]:
    """For each ``task`` call of one answer, in order: None to run it, or why not."""
    decided: list[Refusal | None] = []
    for position, _ in enumerate(calls):
        if position >= settings.subagent_max_parallel:
            decided.append(
                {
                    "status": "capped",
                    "stop_reason": "parallel_limit",
                    "message": f"not run: at most {settings.subagent_max_parallel} task calls "
                    f"run per answer (Settings.subagent_max_parallel) and this was call "
                    f"{position + 1}. Call it again once the others have returned.",
                }
            )
        elif earlier + position >= settings.subagent_max_per_run:
            decided.append(
                {
                    "status": "capped",
                    "stop_reason": "run_limit",
                    "message": f"not run: this run already started "
                    f"{settings.subagent_max_per_run} subagents "
                    "(Settings.subagent_max_per_run). Do the work yourself, or continue "
                    "after the user's next message.",
                }
            )
        else:
            decided.append(None)
    return decided


class SubagentRouter:
    """Router after ``model`` for a graph with a ``task`` tool."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def __call__(
        self, state: dict[str, Any], runtime: Runtime[Any]
    ) -> Literal["tools", "invalid_calls", "finish"] | list[Send]:
        """``route_after_model``, except that an answer with ``task`` calls fans out."""
        target = route_after_model(state)  # type: ignore[arg-type]
        window: list[AnyMessage] = state["messages"]
        reply = window[-1]
        assert isinstance(reply, AIMessage)
        tasks = [call for call in reply.tool_calls if call["name"] == TASK_TOOL]
        if not tasks:
            return target
        settings = settings_for(runtime.context, self._settings)
        decided = refusals(tasks, _earlier_tasks(window), settings)
        sends = [
            Send(SUBAGENT_NODE, TaskPayload(call=call, refusal=refusal))
            for call, refusal in zip(tasks, decided, strict=True)
        ]
        others = [call for call in reply.tool_calls if call["name"] != TASK_TOOL]
        if others:
            sends.append(Send("tools", others))
        return sends
