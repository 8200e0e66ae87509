"""A deterministic chat model that plays back a script, for the demo and for tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

ScriptItem = AIMessage | str | BaseException
"""One scripted turn: a reply, plain text, or an error to raise."""

Responder = Callable[[list[BaseMessage]], AIMessage]
"""Computes a reply from the request when the script has run out."""

ToolResponder = Callable[[list[BaseMessage], frozenset[str]], AIMessage]
"""Computes a reply from the request and the names of the tools bound for it."""


class ScriptExhaustedError(RuntimeError):
    """The scripted model was called more often than its script allows."""


def bound_tool_names(tools: Sequence[dict[str, Any]]) -> frozenset[str]:
    """The names of bound tool schemas (OpenAI ``{"function": {"name": ...}}`` or ``{"name"}``)."""
    names: set[str] = set()
    for schema in tools:
        function = schema.get("function")
        name = function.get("name") if isinstance(function, dict) else schema.get("name")
        if isinstance(name, str):
            names.add(name)
    return frozenset(names)


class ScriptedChatModel(BaseChatModel):
    """Replays ``script`` in order, then asks ``responder``; records every request.

    Instead of ``responder``, a ``tool_responder`` also gets the names of the tools bound
    for the call (``bind_tools``), so it can call only tools the caller gave it. Script
    items are played as written, whatever is bound.

    ``requests`` holds the exact messages of each call and ``tool_requests`` the tool
    schemas bound for it, so tests can assert what the model received.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    # Typed loosely for pydantic (AIMessage's validator rejects plain strings); checked below.
    script: list[Any] = Field(default_factory=list)
    responder: Responder | None = None
    tool_responder: ToolResponder | None = None
    model_name: str = "scripted"
    requests: list[list[BaseMessage]] = Field(default_factory=list)
    tool_requests: list[list[dict[str, Any]]] = Field(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _position: int = PrivateAttr(default=0)

    def model_post_init(self, context: Any, /) -> None:
        """Reject script items that are not replies, text or exceptions, and two responders."""
        if self.responder is not None and self.tool_responder is not None:
            raise TypeError(
                "ScriptedChatModel takes responder= or tool_responder=, not both: pass "
                "tool_responder= when the reply depends on the tools bound for the call"
            )
        for index, item in enumerate(self.script):
            if not isinstance(item, (AIMessage, str, BaseException)):
                raise TypeError(
                    f"script item {index} must be an AIMessage, a str or an exception, "
                    f"got {type(item).__name__}"
                )

    @property
    def _llm_type(self) -> str:
        return "ctxgraph-scripted"

    @property
    def calls(self) -> int:
        """How many requests the model has answered."""
        return len(self.requests)

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tool schemas; they are recorded with each request, as a provider would get them."""
        schemas = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=schemas, **kwargs)

    def _next_reply(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage:
        # The lock keeps the record and the script position consistent; the responder
        # runs outside it, so concurrent calls (a background summary job and a turn)
        # proceed together as they would against a real endpoint.
        item: ScriptItem | None = None
        with self._lock:
            self.requests.append(list(messages))
            self.tool_requests.append(list(tools))
            calls = len(self.requests)
            if self._position < len(self.script):
                item = self.script[self._position]
                self._position += 1
        if item is None:
            if self.tool_responder is not None:
                item = self.tool_responder(list(messages), bound_tool_names(tools))
            elif self.responder is not None:
                item = self.responder(list(messages))
            else:
                raise ScriptExhaustedError(
                    f"scripted model has no reply for call {calls}: its script holds "
                    f"{len(self.script)} item(s) and it has no responder"
                )
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, str):
            return AIMessage(content=item)
        return item.model_copy(deep=True)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = self._next_reply(messages, kwargs.get("tools", []))
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        reply = self._next_reply(messages, kwargs.get("tools", []))
        text = reply.content if isinstance(reply.content, str) else ""
        pieces = [piece + " " for piece in text.split(" ")] if text else []
        if pieces:
            pieces[-1] = pieces[-1][:-1]
        for piece in pieces:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece, id=reply.id))
            if run_manager is not None:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk
        final = AIMessageChunk(
            content="" if pieces else reply.content,
            id=reply.id,
            tool_call_chunks=[
                tool_call_chunk(
                    name=call["name"],
                    args=json.dumps(call["args"], ensure_ascii=False),
                    id=call.get("id"),
                    index=index,
                )
                for index, call in enumerate(reply.tool_calls)
            ],
            response_metadata={"finish_reason": "tool_calls" if reply.tool_calls else "stop"},
        )
        yield ChatGenerationChunk(message=final)
