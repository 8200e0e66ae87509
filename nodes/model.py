"""The ``model`` node: assembles the request the main model sees and calls it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime

from state.context import Context, require_context
from state.graph_state import AgentState
from state.models import input_window
from state.settings import Settings
from state.tokens import TokenCounter


class RequestTooLargeError(RuntimeError):
    """The next model request does not fit the main model's input window."""


def effective_settings(context: Context, default: Settings) -> Settings:
    """The run's settings: the context's override if it carries one, else the graph's."""
    return context.settings if context.settings is not None else default


class ModelNode:
    """Calls the main model with ``[system rules] + working messages`` and the bound tools."""

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        settings: Settings,
        counter: TokenCounter,
    ) -> None:
        self._model = model
        self._bound: Runnable[LanguageModelInput, BaseMessage] = (
            model.bind_tools(list(tools)) if tools else model
        )
        self._settings = settings
        self._counter = counter
        self._tool_tokens = counter.count_tools(list(tools))

    def build_request(self, state: AgentState, settings: Settings) -> list[BaseMessage]:
        """The exact messages the main model receives for this state."""
        return [SystemMessage(content=settings.system_prompt), *state["messages"]]

    def _checked_request(self, state: AgentState, runtime: Runtime[Context]) -> list[BaseMessage]:
        settings = effective_settings(require_context(runtime.context), self._settings)
        request = self.build_request(state, settings)
        window = input_window(self._model, settings.context_window)
        if window is not None:
            tokens = self._counter.count_messages(request) + self._tool_tokens
            if tokens > window:
                raise RequestTooLargeError(
                    f"the next model request is {tokens} tokens, over the main model's input "
                    f"window of {window} tokens ({len(request)} messages, "
                    f"{self._tool_tokens} tokens of tool schemas)"
                )
        return request

    @staticmethod
    def _update(reply: BaseMessage) -> dict[str, Any]:
        if not isinstance(reply, AIMessage):
            raise TypeError(f"the main model returned {type(reply).__name__}, not an AIMessage")
        return {"messages": [reply]}

    def invoke(self, state: AgentState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Synchronous model call."""
        return self._update(self._bound.invoke(self._checked_request(state, runtime)))

    async def ainvoke(self, state: AgentState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Asynchronous model call."""
        return self._update(await self._bound.ainvoke(self._checked_request(state, runtime)))
