"""The ``model`` node: assembles the request the main model sees and calls it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime

from ctxgraph.nodes.invalid_calls import with_cut_off_calls_invalid, with_invalid_call_ids
from ctxgraph.nodes.request import RequestBuilder
from ctxgraph.nodes.settings import effective_settings
from ctxgraph.state.context import Context, require_context
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.models import input_window
from ctxgraph.state.settings import Settings


class RequestTooLargeError(RuntimeError):
    """The next model request does not fit the main model's input window."""


class ModelNode:
    """Calls the main model with the assembled request and the bound tools."""

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        settings: Settings,
        builder: RequestBuilder,
    ) -> None:
        self._model = model
        self._bound: Runnable[LanguageModelInput, BaseMessage] = (
            model.bind_tools(list(tools)) if tools else model
        )
        self._settings = settings
        self._builder = builder

    def _checked_request(self, state: AgentState, runtime: Runtime[Context]) -> list[BaseMessage]:
        settings = effective_settings(require_context(runtime.context), self._settings)
        request = self._builder.build(state, settings)
        window = input_window(self._model, settings.context_window)
        if window is not None:
            size = self._builder.measure(request)
            if size.tokens > window:
                raise RequestTooLargeError(
                    f"the next model request is {size.tokens} tokens, over the main model's "
                    f"input window of {window} tokens ({size.messages} messages, "
                    f"{self._builder.tool_tokens} tokens of tool schemas)"
                )
        return request

    @staticmethod
    def _update(reply: BaseMessage) -> dict[str, Any]:
        """The answer as a state update, its unusable tool calls marked invalid.

        Calls of an answer cut off at the output limit count as invalid too, and every
        invalid call gets an id, so its error result can answer it.
        """
        if not isinstance(reply, AIMessage):
            raise TypeError(f"the main model returned {type(reply).__name__}, not an AIMessage")
        return {"messages": [with_invalid_call_ids(with_cut_off_calls_invalid(reply))]}

    def invoke(self, state: AgentState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Synchronous model call."""
        return self._update(self._bound.invoke(self._checked_request(state, runtime)))

    async def ainvoke(self, state: AgentState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Asynchronous model call."""
        return self._update(await self._bound.ainvoke(self._checked_request(state, runtime)))
