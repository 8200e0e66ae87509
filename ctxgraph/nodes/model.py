"""The ``model`` node: assembles the request the main model sees and calls it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.runtime import Runtime

from ctxgraph.nodes.cache_markers import accepts_cache_control, with_cache_marker
from ctxgraph.nodes.invalid_calls import with_cut_off_calls_invalid, with_invalid_call_ids
from ctxgraph.nodes.part import BeforeModel, Part
from ctxgraph.nodes.request import Request, RequestAssembler
from ctxgraph.nodes.settings import effective_settings
from ctxgraph.nodes.text_tool_calls import (
    TextToolCallMode,
    read_text_tool_calls,
    report_text_tool_calls,
)
from ctxgraph.nodes.tools.binding import ToolBinding
from ctxgraph.state.calibration import TokenCalibration, calibrated, reported_input_tokens
from ctxgraph.state.context import Context, require_context
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.messages import sanitized_message
from ctxgraph.state.models import input_window
from ctxgraph.state.settings import Settings
from ctxgraph.state.usage import call_usage, usage_update

cache_logger = logging.getLogger("ctxgraph.cache")


class RequestTooLargeError(RuntimeError):
    """The next model request does not fit the main model's input window."""


@dataclass(frozen=True)
class ModelCall:
    """One model call: the model with its tools bound, the request, the extra update."""

    bound: Runnable[LanguageModelInput, BaseMessage]
    request: list[BaseMessage]
    extra: dict[str, Any]
    carries: tuple[Any, ...]
    """What each part's ``before_model`` handed on to its ``after_reply``."""
    calibration: TokenCalibration | None = None
    """The thread's token calibration before this call."""
    tool_names: frozenset[str] = frozenset()
    """The tools bound for this call."""
    text_tool_calls: TextToolCallMode = "off"
    """``Settings.text_tool_calls`` of this run."""


class ModelNode:
    """Calls the main model with the assembled request and the tools the parts allow.

    Before each call every part's ``before_model`` runs: it may answer the run without a
    model call, change the state the request is built from, or add to the update. After
    the reply each part's ``after_reply`` adds its share of the update.
    """

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        settings: Settings,
        builder: RequestAssembler,
        parts: Sequence[Part] = (),
    ) -> None:
        self._model = model
        self._tools = list(tools)
        self._binding = ToolBinding(self._tools)
        # The model with each distinct set of tools bound, bound once per set.
        self._bound: dict[frozenset[str], Runnable[LanguageModelInput, BaseMessage]] = {}
        self._lock = threading.Lock()
        self._settings = settings
        self._builder = builder
        self._parts = tuple(parts)

    def _checked_request(self, state: AgentState, settings: Settings) -> list[BaseMessage]:
        request = self._builder.build(state, settings)
        window = input_window(self._model, settings.context_window)
        if window is not None:
            size = self._builder.measure(request)
            if size.tokens > window:
                raise RequestTooLargeError(
                    f"the next model request is {size.tokens} tokens, over the main model's "
                    f"input window of {window} tokens ({size.messages} messages, "
                    f"{request.tool_tokens} tokens of tool schemas)"
                )
        return request

    def _bound_for(self, names: frozenset[str]) -> Runnable[Any, BaseMessage]:
        """The model with the tools ``names`` bound, bound once per distinct set.

        ``names`` are those the request was measured with (``Request.tool_names``): the
        caller's tools always, a gated tool once it can help (``ToolBinding``), within
        the parts' tool filter.
        """
        with self._lock:
            bound = self._bound.get(names)
            if bound is None:
                tools = self._binding.select(names)
                bound = self._model.bind_tools(tools) if tools else self._model
                self._bound[names] = bound
        return bound

    def reply_update(self, reply: BaseMessage, call: ModelCall) -> dict[str, Any]:
        """The answer as a state update, its unusable tool calls marked invalid.

        Tool calls the answer wrote as text become real calls first, when
        ``Settings.text_tool_calls`` and the bound tools allow (``read_text_tool_calls``),
        so they are checked like the model's own; the event ``model.text_tool_calls``
        reports them, or the warning about text left as the answer. Calls of an answer
        cut off at the output limit count as invalid too, and every invalid call gets an
        id, so its error result can answer it. NUL and lone
        surrogates anywhere in the answer become U+FFFD, so every store can hold it
        (``sanitized_message``). Each part adds its share (``Part.after_reply``). An
        answer that reports its input tokens updates ``token_calibration``. What the call
        cost (reported, else counted locally) is added to ``model_usage`` as ``main``.
        """
        if not isinstance(reply, AIMessage):
            raise TypeError(f"the main model returned {type(reply).__name__}, not an AIMessage")
        reply = self._with_text_calls(reply, call)
        answer = sanitized_message(with_invalid_call_ids(with_cut_off_calls_invalid(reply)))
        extra = call.extra
        placement = call.request.placement if isinstance(call.request, Request) else None
        for part, carry in zip(self._parts, call.carries, strict=True):
            extra = {**extra, **part.after_reply(answer, placement, carry)}
        calibration = self._calibration(answer, call)
        if calibration is not None:
            extra = {**extra, "token_calibration": calibration}
        builder = self._builder
        usage = call_usage(
            "main",
            answer,
            # Counted only when the provider reported nothing, from cached message counts.
            local_input=lambda: builder.measure(call.request).tokens,
            local_output=lambda: builder.message_tokens(answer),
        )
        extra = {**extra, "model_usage": usage_update(usage)}
        return {"messages": [answer], **extra}

    def _with_text_calls(self, reply: AIMessage, call: ModelCall) -> AIMessage:
        """``reply`` with the tool calls it wrote as text made real, when that is safe."""
        if call.text_tool_calls == "off" or reply.tool_calls or not call.tool_names:
            return reply
        tools = self._binding.select(call.tool_names)
        found = read_text_tool_calls(reply, tools, call.text_tool_calls)
        report_text_tool_calls(found, _thread_id())
        return found.message

    def _calibration(self, answer: AIMessage, call: ModelCall) -> TokenCalibration | None:
        """The calibration updated with ``answer``'s reported input tokens, if any."""
        model = self._builder.calibration_model
        reported = reported_input_tokens(answer)
        if model is None or reported is None:
            return None
        local = self._builder.local_tokens(call.request)
        return calibrated(call.calibration, model, local, reported)

    def settings_of(self, runtime: Runtime[Context]) -> Settings:
        """The graph's settings with the run's ``Context.settings`` over them."""
        return effective_settings(require_context(runtime.context), self._settings)

    def prepare(
        self, state: AgentState, settings: Settings, before: Sequence[BeforeModel]
    ) -> ModelCall | dict[str, Any]:
        """The call to make, or the finished update of a run that needs no model call."""
        extra: dict[str, Any] = {}
        for done in before:
            if done.answer is not None:
                return done.answer
            if done.state is not None:
                state = done.state
            extra = {**extra, **done.update}
        request = self._checked_request(state, settings)
        names = request.tool_names if isinstance(request, Request) else None
        if names is None:
            names = self._builder.bound_names(state, settings)
        bound = self._bound_for(names)
        extra = {**extra, **self._binding.unlock_update(state, settings)}
        return ModelCall(
            bound,
            request,
            extra,
            tuple(done.carry for done in before),
            state.get("token_calibration"),
            tool_names=names,
            text_tool_calls=settings.text_tool_calls,
        )

    _markers_logged = False
    """Whether the "no cache markers for this model" debug line was logged (once a node)."""

    def sent(self, request: list[BaseMessage], settings: Settings) -> list[BaseMessage]:
        """What the model is sent: ``request``, with a cache marker when it is switched on.

        The marker goes on a copy (``with_cache_marker``); ``request`` stays as measured.
        """
        if not settings.cache_markers or not isinstance(request, Request):
            return request
        if accepts_cache_control(self._model):
            return with_cache_marker(request, request.stable)
        if not self._markers_logged:
            self._markers_logged = True
            cache_logger.debug(
                "cache_markers is on, but the main model (%s) takes no cache_control "
                "blocks: requests are sent without markers",
                type(self._model).__name__,
            )
        return request

    def before_parts(self, state: AgentState, settings: Settings, store: Any) -> list[BeforeModel]:
        """Every part's ``before_model``, each given the state the previous ones left."""
        done: list[BeforeModel] = []
        for part in self._parts:
            result = part.before_model(state, settings, store)
            done.append(result)
            if result.answer is not None:
                break
            state = result.state if result.state is not None else state
        return done

    async def abefore_parts(
        self, state: AgentState, settings: Settings, store: Any
    ) -> list[BeforeModel]:
        """Async :meth:`before_parts`."""
        done: list[BeforeModel] = []
        for part in self._parts:
            result = await part.abefore_model(state, settings, store)
            done.append(result)
            if result.answer is not None:
                break
            state = result.state if result.state is not None else state
        return done

    def invoke(self, state: AgentState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Synchronous model call."""
        settings = self.settings_of(runtime)
        call = self.prepare(state, settings, self.before_parts(state, settings, runtime.store))
        if not isinstance(call, ModelCall):
            return call
        return self.reply_update(call.bound.invoke(self.sent(call.request, settings)), call)

    async def ainvoke(self, state: AgentState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Asynchronous model call."""
        settings = self.settings_of(runtime)
        before = await self.abefore_parts(state, settings, runtime.store)
        call = self.prepare(state, settings, before)
        if not isinstance(call, ModelCall):
            return call
        return self.reply_update(await call.bound.ainvoke(self.sent(call.request, settings)), call)


def _thread_id() -> str:
    """The running graph's thread id (empty outside a run or without one)."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # not inside a run
        return ""
    thread_id = configurable.get("thread_id")
    return thread_id if isinstance(thread_id, str) else ""
