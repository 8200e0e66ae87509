"""The nodes of a child graph: its state, its model step and where each step goes next.

Each model call of a child adds what it cost to the child's ``model_usage`` under the
role ``subagent`` (nested children's totals come back the same way); the ``subagent``
node hands those totals to the parent's ``model_usage`` when the child ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, NotRequired

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from ctxgraph.nodes.subagents.record import model_update
from ctxgraph.nodes.subagents.stop import check_stop
from ctxgraph.nodes.text_tool_calls import (
    TextToolCallMode,
    read_text_tool_calls,
    report_text_tool_calls,
)
from ctxgraph.state.delegations import DelegationRecord, merge_delegations
from ctxgraph.state.messages import sanitized_message
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.state.usage import UsageTotals, add_usage, call_usage, usage_update

_COUNTER = TokenCounter(max_entries=2_000)
"""Counts a child's request and answer when its provider reports no usage."""


class ChildState(TypedDict):
    """A child's checkpointed state: its transcript, its delegations and what its calls cost."""

    messages: Annotated[list[AnyMessage], add_messages]
    delegations: NotRequired[Annotated[DelegationRecord, merge_delegations]]
    model_usage: NotRequired[Annotated[UsageTotals, add_usage]]


class ChildModel:
    """The child's model step: checks its stop flags, then calls the model on its transcript.

    A child that may delegate records the ``task`` calls of its answers, as the parent does.
    """

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        *,
        delegates: bool,
        text_tool_calls: TextToolCallMode = "recover",
    ) -> None:
        """Call ``model`` with ``tools`` bound; ``text_tool_calls`` as the parent's setting.

        An answer that wrote its tool calls as text is read as the parent's model node
        reads one (``nodes.text_tool_calls``): made real calls when safe, else flagged.
        """
        self._bound: Runnable[LanguageModelInput, BaseMessage] = (
            model.bind_tools(list(tools)) if tools else model
        )
        self._tools = list(tools)
        self._tool_tokens: int | None = None
        self._delegates = delegates
        self._text_tool_calls: TextToolCallMode = text_tool_calls

    def _update(self, reply: BaseMessage, request: list[AnyMessage]) -> dict[str, Any]:
        if not isinstance(reply, AIMessage):
            raise TypeError(f"a subagent's model returned {type(reply).__name__}, not an AIMessage")
        found = read_text_tool_calls(reply, self._tools, self._text_tool_calls)
        report_text_tool_calls(found, "")
        reply = sanitized_message(found.message)  # storable in the child's checkpoint
        extra = model_update(reply, []) if self._delegates else {}
        answer = reply
        usage = call_usage(
            "subagent",
            reply,
            local_input=lambda: _COUNTER.count_messages(request) + self._tools_tokens(),
            local_output=lambda: _COUNTER.count_message(answer),
        )
        return {"messages": [reply], **extra, "model_usage": usage_update(usage)}

    def _tools_tokens(self) -> int:
        """Tokens of the bound tools' schemas, counted once (for local usage counts)."""
        if self._tool_tokens is None:
            self._tool_tokens = _COUNTER.count_tools(self._tools)
        return self._tool_tokens

    def invoke(self, state: ChildState, runtime: Any, config: RunnableConfig) -> dict[str, Any]:
        """Synchronous model call (refused once the child was told to stop)."""
        check_stop(config)
        request = state["messages"]
        return self._update(self._bound.invoke(request, config), request)

    async def ainvoke(
        self, state: ChildState, runtime: Any, config: RunnableConfig
    ) -> dict[str, Any]:
        """Asynchronous model call (refused once the child was told to stop)."""
        check_stop(config)
        request = state["messages"]
        return self._update(await self._bound.ainvoke(request, config), request)


def route_start(state: ChildState) -> Literal["model", "tools", "done"]:
    """Where a child (re)starts: a finished transcript is done, pending calls run first.

    A child's first messages have fixed ids, so running it again in its namespace (a
    parent step replayed after a crash) continues its saved transcript.
    """
    last = state["messages"][-1] if state["messages"] else None
    if isinstance(last, AIMessage):
        return "tools" if last.tool_calls else "done"
    return "model"


def route_after_child_model(state: ChildState) -> Literal["tools", "done"]:
    """Tool calls run; any other answer is the child's final answer."""
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else "done"
