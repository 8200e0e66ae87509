"""Assembles the exact request the main model sees from the parts, and measures it."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from langchain_core.messages import AnyMessage, BaseMessage, SystemMessage
from langchain_core.tools import BaseTool

from ctxgraph.nodes.gates import ToolFilter
from ctxgraph.nodes.part import Part, Placement, TurnMessage
from ctxgraph.nodes.request_size import RequestSize, state_key
from ctxgraph.nodes.tools.binding import ToolBinding, ToolTokens
from ctxgraph.state.calibration import factor_of, scaled
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.messages import is_real_user_message
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter

SYSTEM_PROMPT_ID = "ctxgraph-system-prompt"


def view_digest(text: str) -> str:
    """The first 16 hex digits of the SHA-256 of ``text``: the digest data-message ids carry."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def system_message(prompt: str, listing: str) -> SystemMessage:
    """The system rules, followed by the text the parts append, when there is any.

    Both change only on a configuration change, so they lead the request. The id names
    the appended text's digest, so token counts cached per id stay right.
    """
    if not listing:
        return SystemMessage(content=prompt, id=SYSTEM_PROMPT_ID)
    return SystemMessage(
        content=f"{prompt}\n\n{listing}", id=f"{SYSTEM_PROMPT_ID}-{view_digest(listing)}"
    )


def latest_user_index(window: Sequence[BaseMessage]) -> int:
    """Index of the latest real user message of ``window``; 0 when it has none."""
    for index in range(len(window) - 1, -1, -1):
        if is_real_user_message(window[index]):
            return index
    return 0


class Request(list[BaseMessage]):
    """A built request, with what the model node needs to know about how it was built.

    ``factor`` is the calibration factor of the state it was built for:
    ``RequestAssembler.measure`` multiplies its local count by it; a plain list of
    messages is measured as counted locally. ``stable`` is the length of the stable part
    (the messages before the window), ``placement`` where a part's per-turn message went,
    as the part reports it (None when no part placed one).
    """

    factor: float = 1.0
    stable: int = 0
    placement: Placement | None = None
    tool_tokens: int | None = None
    """Tokens of the tool schemas bound for the state it was built for."""
    tool_names: frozenset[str] | None = None
    """The names of those tools: what ``ModelNode`` binds for the call."""


@dataclass(frozen=True)
class _Measured:
    """A measured request: its message objects, schema tokens, factor and size."""

    messages: tuple[BaseMessage, ...]
    tool_tokens: int | None
    factor: float
    size: RequestSize

    def matches(self, request: Request, counter: TokenCounter) -> bool:
        """True if ``request`` has these schemas and factor and messages counted alike.

        Alike are the very same objects, or (with tiktoken) messages that say the same:
        the router at the start of a run sees the run's input under ids the state does
        not keep.
        """
        return (
            request.tool_tokens == self.tool_tokens
            and request.factor == self.factor
            and len(request) == len(self.messages)
            and all(
                a is b or counter.counted_alike(a, b)
                for a, b in zip(request, self.messages, strict=True)
            )
        )


class RequestAssembler:
    """Builds the request from the parts: the stable part first, then the window.

    The stable part changes only when a part's stable piece does: ``[system rules
    + what the parts append] + [the window's leading system messages] + [the parts' stable
    messages]``; the tool schemas, bound apart, change at most a few times per thread. Then
    the working messages, with the parts' per-turn data messages placed in them. It is the
    ``RequestMeasurer`` the graph's nodes measure requests with.

    Given the main model's name (``model``) and counting with tiktoken, it measures
    requests as the provider bills them: the local count times the thread's
    ``token_calibration`` factor for that model (see ``ctxgraph.state.calibration``). A
    caller's ``token_counter`` is taken as exact: then nothing is calibrated.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool],
        counter: TokenCounter,
        parts: Sequence[Part] = (),
        *,
        model: str | None = None,
    ) -> None:
        self._counter = counter
        self._model = model if counter.tiktoken else None
        self._parts = tuple(parts)
        self._ranked = tuple(sorted(self._parts, key=lambda part: part.rank))
        self._system_cache: tuple[tuple[str, str], SystemMessage] | None = None
        self._binding = ToolBinding(tools)
        # Schema tokens per distinct bound set, each counted once.
        self._schemas = ToolTokens(self._binding, counter.count_tools)
        self._schemas.warm(self._binding.unlock_sets())
        # The size of the last measured state: the router, compact and model nodes of one
        # step measure the same request.
        self._size_cache: tuple[Hashable, RequestSize] | None = None
        # The last measured request: the model node measures the very messages the router
        # measured for the same state (see ``measure``).
        self._measured: _Measured | None = None

    @property
    def parts(self) -> tuple[Part, ...]:
        """The parts, in the order they were given."""
        return self._parts

    @property
    def binding(self) -> ToolBinding:
        """The graph's tools and which of them a state binds."""
        return self._binding

    @property
    def calibration_model(self) -> str | None:
        """The model name requests are calibrated for; None when nothing is calibrated."""
        return self._model

    @property
    def counter(self) -> TokenCounter:
        """The graph's token counter."""
        return self._counter

    def factor(self, state: AgentState) -> float:
        """What local counts of ``state``'s requests are multiplied by (1.0 uncalibrated)."""
        if self._model is None:
            return 1.0
        return factor_of(state.get("token_calibration"), self._model)

    @property
    def tool_tokens(self) -> int:
        """Tokens of the schemas bound in every state (the tools without a gate).

        A plain list of messages is measured with these; a built ``Request`` with the
        schemas bound for its state (``bound_tool_tokens``).
        """
        return self._schemas(self._binding.always_bound())

    def bound_tool_tokens(self, state: AgentState, settings: Settings) -> int:
        """Tokens of the tool schemas a request for ``state`` binds, as ``ModelNode`` binds them."""
        return self._schemas(self.bound_names(state, settings))

    def tool_filter(self, state: AgentState, settings: Settings) -> ToolFilter | None:
        """What the parts let a request for ``state`` bind (the first part that restricts)."""
        for part in self._parts:
            restriction = part.tool_filter(state, settings)
            if restriction is not None:
                return restriction
        return None

    def bound_names(self, state: AgentState, settings: Settings) -> frozenset[str]:
        """The tools a request for ``state`` binds, within the parts' tool filter."""
        return self._binding.names(state, settings, self.tool_filter(state, settings))

    def build(self, state: AgentState, settings: Settings) -> Request:
        """The messages the main model receives for ``state``, with its calibration factor.

        A pure function of ``state`` and ``settings``: the same inputs give equal messages
        (the very same data-message objects while their text is unchanged).
        """
        return self._build(state, settings, self._stable_pieces(state, settings))

    def _stable_pieces(self, state: AgentState, settings: Settings) -> _Stable:
        appended = "\n\n".join(
            text for part in self._parts if (text := part.system(state, settings))
        )
        messages = tuple(m for part in self._ranked for m in part.stable(state, settings))
        return _Stable(appended, messages, self.bound_names(state, settings))

    def _build(self, state: AgentState, settings: Settings, stable: _Stable) -> Request:
        """``build`` with the stable pieces and bound tool names already worked out."""
        window: Sequence[AnyMessage] = state.get("messages") or []
        leading = 0
        while leading < len(window) and isinstance(window[leading], SystemMessage):
            leading += 1
        system = self._system_message(settings.system_prompt, stable.appended)
        request = Request([system, *window[:leading], *stable.messages])
        request.factor = self.factor(state)
        request.tool_names = stable.names
        request.tool_tokens = self._schemas(stable.names)
        request.stable = len(request)
        working: Sequence[AnyMessage] = window[leading:]
        for part in self._parts:
            working = part.window(working)
        request.extend(self._with_turn_context(state, request, working))
        return request

    def _with_turn_context(
        self, state: AgentState, request: Request, window: Sequence[BaseMessage]
    ) -> list[BaseMessage]:
        """``window`` with the parts' per-turn messages placed in it.

        Records the placement a part reports on ``request``.
        """
        placed: list[TurnMessage] = []
        for part in self._ranked:
            placed.extend(part.per_turn(state, window))
            placement = part.placement(state, window)
            if placement is not None and request.placement is None:
                request.placement = placement
        if not placed:
            return list(window)
        messages: list[BaseMessage] = []
        for index, message in enumerate(window):
            messages.extend(turn.message for turn in placed if turn.before == index)
            messages.append(message)
        messages.extend(turn.message for turn in placed if turn.before >= len(window))
        return messages

    def _system_message(self, prompt: str, listing: str) -> SystemMessage:
        # One message object per prompt and listing: a stable id lets the token counter
        # cache its count.
        key = (prompt, listing)
        if self._system_cache is None or self._system_cache[0] != key:
            self._system_cache = (key, system_message(prompt, listing))
        return self._system_cache[1]

    def measure_state(self, state: AgentState, settings: Settings) -> RequestSize:
        """Size of the request ``build(state, settings)`` makes, cached for repeated calls."""
        stable = self._stable_pieces(state, settings)
        key = (
            state_key(state, settings),
            stable.appended,
            tuple(m.id for m in stable.messages),
            tuple(part.request_key(state, settings) for part in self._parts),
            self.factor(state),
            stable.names,
        )
        if self._size_cache is not None and self._size_cache[0] == key:
            return self._size_cache[1]
        size = self.measure(self._build(state, settings, stable))
        self._size_cache = (key, size)
        return size

    def measure(self, request: Sequence[BaseMessage]) -> RequestSize:
        """Tokens (tool schemas included) and message count of a built request.

        A ``Request`` counts as the provider bills it (its local count times its
        calibration factor); a plain list of messages as counted locally. A ``Request``
        with the schemas and factor of the last one measured and messages counted alike
        (``TokenCounter.counted_alike``: the very same objects, or with tiktoken the same
        text) has that one's size, so the model node does not count again what the router
        counted for the same state. Messages are not changed in place: a changed message
        is a new object, as every reducer and node makes it.
        """
        if not isinstance(request, Request):
            return RequestSize(tokens=self.local_tokens(request), messages=len(request))
        measured = self._measured
        if measured is not None and measured.matches(request, self._counter):
            return measured.size
        size = RequestSize(
            tokens=scaled(self.local_tokens(request), request.factor), messages=len(request)
        )
        self._measured = _Measured(tuple(request), request.tool_tokens, request.factor, size)
        return size

    def message_tokens(self, message: BaseMessage) -> int:
        """Tokens of one message as counted locally (framing included, no tool schemas)."""
        return self._counter.count_message(message)

    def local_tokens(self, request: Sequence[BaseMessage]) -> int:
        """Tokens of ``request`` (tool schemas included) as counted locally, uncalibrated.

        A ``Request`` carries the schemas bound for its state; a plain list counts those
        bound in every state (``tool_tokens``).
        """
        tools = request.tool_tokens if isinstance(request, Request) else None
        schemas = self.tool_tokens if tools is None else tools
        return self._counter.count_messages(request) + schemas


@dataclass(frozen=True)
class _Stable:
    """The stable pieces of one request: appended system text, messages, bound tools."""

    appended: str
    messages: tuple[BaseMessage, ...]
    names: frozenset[str]
