"""Assembles the exact request the main model sees, and measures it."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool

from ctxgraph.nodes.compaction.partition import repair_tool_pairs
from ctxgraph.nodes.compaction.render import render_summary
from ctxgraph.nodes.request_size import RequestSize, state_key
from ctxgraph.nodes.skills.view import NO_SKILLS, SkillParts, SkillRequests
from ctxgraph.nodes.subagents.render import delegations_message
from ctxgraph.nodes.tools.binding import ToolBinding, ToolTokens
from ctxgraph.state.calibration import factor_of, scaled
from ctxgraph.state.compaction_state import CompactionMark, SummaryRecord
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.messages import HIDE_FROM_UI_KEY, ORIGIN_KEY, is_real_user_message
from ctxgraph.state.placement import MemoryPlacement
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter

SUMMARY_MESSAGE_ID = "ctxgraph-summary"
MEMORY_MESSAGE_ID = "ctxgraph-memory"
SYSTEM_PROMPT_ID = "ctxgraph-system-prompt"


def summary_message(summary: Mapping[str, Any], version: int, ledger_tokens: int) -> HumanMessage:
    """The summary as a data message: marked by origin, hidden from UIs, never stored."""
    return HumanMessage(
        content=render_summary(summary, version, ledger_tokens),
        id=f"{SUMMARY_MESSAGE_ID}-v{version}",
        additional_kwargs={ORIGIN_KEY: "summary", HIDE_FROM_UI_KEY: True},
    )


def view_digest(text: str) -> str:
    """The first 16 hex digits of the SHA-256 of ``text``: the digest data-message ids carry."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def memory_message(view: str) -> HumanMessage:
    """The memory view as a data message: marked by origin, hidden from UIs, never stored.

    The id carries a digest of the text, so token counts cached per id stay right.
    """
    return HumanMessage(
        content=view,
        id=f"{MEMORY_MESSAGE_ID}-{view_digest(view)}",
        additional_kwargs={ORIGIN_KEY: "memory", HIDE_FROM_UI_KEY: True},
    )


def system_message(prompt: str, listing: str) -> SystemMessage:
    """The system rules, followed by the skill listing when there is one.

    Both change only on a configuration or skill change, so they lead the request. The id
    names the listing's digest, so token counts cached per id stay right.
    """
    if not listing:
        return SystemMessage(content=prompt, id=SYSTEM_PROMPT_ID)
    return SystemMessage(
        content=f"{prompt}\n\n{listing}", id=f"{SYSTEM_PROMPT_ID}-{view_digest(listing)}"
    )


def anchor_index(window: Sequence[BaseMessage], view: str, placed: MemoryPlacement | None) -> int:
    """Where in ``window`` the memory view goes: the index of the message it precedes.

    The previous request's spot while the view is byte-identical and that message is still
    in the window; otherwise before the latest real user message; without one, at 0 (the
    end of the stable part).
    """
    if placed and placed.get("digest") == view_digest(view) and placed.get("before"):
        for index, message in enumerate(window):
            if message.id == placed["before"]:
                return index
    return latest_user_index(window)


def latest_user_index(window: Sequence[BaseMessage]) -> int:
    """Index of the latest real user message of ``window``; 0 when it has none."""
    for index in range(len(window) - 1, -1, -1):
        if is_real_user_message(window[index]):
            return index
    return 0


class Request(list[BaseMessage]):
    """A built request, with what the model node needs to know about how it was built.

    ``factor`` is the calibration factor of the state it was built for:
    ``RequestBuilder.measure`` multiplies its local count by it; a plain list of messages
    is measured as counted locally. ``stable`` is the length of the stable part (the
    messages before the window), ``placement`` where the memory view went (None without
    a view).
    """

    factor: float = 1.0
    stable: int = 0
    placement: MemoryPlacement | None = None
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


class RequestBuilder:
    """Builds the request: the stable part first, then the window with the per-turn context.

    The stable part changes only at a compaction or a skill change: ``[system rules + skill
    listing] + [the window's leading system messages] + [summary data] + [active skills
    data]``; the tool schemas, bound apart, change at most a few times per thread. Then
    the working messages, with the per-turn context (``[memory view] + [delegation
    record]``, data messages) placed before the latest real user message (the memory view
    stays where the previous request had it while its text is unchanged,
    ``state["memory_placement"]``). It is the ``RequestMeasurer`` the compaction node
    measures requests with.

    Given the main model's name (``model``) and counting with tiktoken, it measures
    requests as the provider bills them: the local count times the thread's
    ``token_calibration`` factor for that model (see ``ctxgraph.state.calibration``). A
    caller's ``token_counter`` is taken as exact: then nothing is calibrated.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool],
        counter: TokenCounter,
        skills: SkillRequests | None = None,
        *,
        model: str | None = None,
    ) -> None:
        self._counter = counter
        self._model = model if counter.tiktoken else None
        self._skills = skills
        self._system_cache: tuple[tuple[str, str], SystemMessage] | None = None
        self._binding = ToolBinding(tools)
        # Schema tokens per distinct bound set, each counted once.
        self._schemas = ToolTokens(self._binding, counter.count_tools)
        self._schemas.warm(self._binding.unlock_sets())
        # The rendered summary of the latest mark, reused by every request until it changes.
        self._summary_cache: tuple[tuple[str, int], HumanMessage] | None = None
        # The memory message of the latest view; a turn's requests all carry the same one.
        self._memory_cache: tuple[str, HumanMessage] | None = None
        # The delegation record's message, rebuilt when the record changes.
        self._delegations_cache: tuple[str, HumanMessage | None] | None = None
        # The size of the last measured state: the router, compact and model nodes of one
        # step measure the same request.
        self._size_cache: tuple[Hashable, RequestSize] | None = None
        # The last measured request: the model node measures the very messages the router
        # measured for the same state (see ``measure``).
        self._measured: _Measured | None = None

    @property
    def calibration_model(self) -> str | None:
        """The model name requests are calibrated for; None when nothing is calibrated."""
        return self._model

    def factor(self, state: AgentState) -> float:
        """What local counts of ``state``'s requests are multiplied by (1.0 uncalibrated)."""
        if self._model is None:
            return 1.0
        return factor_of(state.get("token_calibration"), self._model)

    @property
    def tool_tokens(self) -> int:
        """Tokens of the schemas bound in every state (the caller's own tools).

        A plain list of messages is measured with these; a built ``Request`` with the
        schemas bound for its state (``bound_tool_tokens``).
        """
        return self._schemas(self._binding.always_bound())

    def bound_tool_tokens(self, state: AgentState, settings: Settings) -> int:
        """Tokens of the tool schemas a request for ``state`` binds.

        Those ``ToolBinding`` binds for the state, within the active skills' tool policy,
        as ``ModelNode`` binds them.
        """
        return self._schemas(self.bound_names(state, settings))

    def bound_names(self, state: AgentState, settings: Settings) -> frozenset[str]:
        """The tools a request for ``state`` binds, within the active skills' policy."""
        policy = self.skill_parts(state, settings).policy
        return self._binding.names(state, settings, policy)

    def _parts(self, state: AgentState, settings: Settings) -> tuple[SkillParts, frozenset[str]]:
        """What skills add to a request for ``state``, and the tools it binds."""
        skills = self.skill_parts(state, settings)
        return skills, self._binding.names(state, settings, skills.policy)

    def skill_parts(self, state: AgentState, settings: Settings) -> SkillParts:
        """What skills add to the request for ``state``: listing, context and tool policy."""
        return NO_SKILLS if self._skills is None else self._skills.parts(state, settings)

    def build(self, state: AgentState, settings: Settings) -> Request:
        """The messages the main model receives for ``state``, with its calibration factor.

        A pure function of ``state`` and ``settings``: the same inputs give equal messages
        (the very same data-message objects while their text is unchanged).
        """
        return self._build(state, settings, *self._parts(state, settings))

    def _build(
        self, state: AgentState, settings: Settings, skills: SkillParts, names: frozenset[str]
    ) -> Request:
        """``build`` with the skill parts and bound tool names already worked out."""
        window: Sequence[AnyMessage] = state.get("messages") or []
        leading = 0
        while leading < len(window) and isinstance(window[leading], SystemMessage):
            leading += 1
        request = Request(self._stable_part(state, settings, skills, window[:leading]))
        request.factor = self.factor(state)
        request.tool_names = names
        request.tool_tokens = self._schemas(names)
        request.stable = len(request)
        safe, _ = repair_tool_pairs(window[leading:])
        request.extend(self._with_turn_context(state, request, safe))
        return request

    def _stable_part(
        self,
        state: AgentState,
        settings: Settings,
        skills: SkillParts,
        leading: Sequence[BaseMessage],
    ) -> list[BaseMessage]:
        """System rules and skill listing, leading system messages, summary, active skills."""
        system = self._system_message(settings.system_prompt, skills.listing)
        stable: list[BaseMessage] = [system, *leading]
        summary = state.get("summary")
        if summary:
            stable.append(self._summary_message(summary, state.get("compaction") or {}, settings))
        if skills.context is not None:
            stable.append(skills.context)
        return stable

    def _with_turn_context(
        self, state: AgentState, request: Request, window: Sequence[BaseMessage]
    ) -> list[BaseMessage]:
        """``window`` with the memory view and the delegation record placed in it.

        Records the view's placement on ``request``.
        """
        messages = list(window)
        latest = latest_user_index(messages)
        delegations = self._delegations_message(state)
        if delegations is not None:
            messages.insert(latest, delegations)
        view = state.get("memory_view")
        if view:
            at = anchor_index(window, view, state.get("memory_placement"))
            before = window[at].id if at < len(window) else None
            request.placement = {"before": before, "digest": view_digest(view)}
            # Before the delegation record when both precede the same message.
            shift = 1 if delegations is not None and at > latest else 0
            messages.insert(at + shift, self._memory(view))
        return messages

    def _system_message(self, prompt: str, listing: str) -> SystemMessage:
        # One message object per prompt and listing: a stable id lets the token counter
        # cache its count.
        key = (prompt, listing)
        if self._system_cache is None or self._system_cache[0] != key:
            self._system_cache = (key, system_message(prompt, listing))
        return self._system_cache[1]

    def _delegations_message(self, state: AgentState) -> HumanMessage | None:
        record = state.get("delegations")
        if not record:
            return None
        key = repr(record)
        if self._delegations_cache is None or self._delegations_cache[0] != key:
            self._delegations_cache = (key, delegations_message(record))
        return self._delegations_cache[1]

    def _memory(self, view: str) -> HumanMessage:
        if self._memory_cache is None or self._memory_cache[0] != view:
            self._memory_cache = (view, memory_message(view))
        return self._memory_cache[1]

    def _summary_message(
        self, summary: SummaryRecord, mark: CompactionMark, settings: Settings
    ) -> HumanMessage:
        checksum = mark.get("checksum")
        key = (str(checksum), settings.ledger_budget)
        if checksum and self._summary_cache and self._summary_cache[0] == key:
            return self._summary_cache[1]
        message = summary_message(summary, int(mark.get("version", 0)), settings.ledger_budget)
        if checksum:
            self._summary_cache = (key, message)
        return message

    def summary_tokens(self, state: AgentState, settings: Settings) -> int:
        """Tokens of the summary message a request for ``state`` carries (0 without one)."""
        summary = state.get("summary")
        if not summary:
            return 0
        mark = state.get("compaction") or {}
        return self._counter.count_message(self._summary_message(summary, mark, settings))

    def measure_state(self, state: AgentState, settings: Settings) -> RequestSize:
        """Size of the request ``build(state, settings)`` makes, cached for repeated calls."""
        skills, tools = self._parts(state, settings)
        context_id = None if skills.context is None else skills.context.id
        key = (state_key(state, settings), skills.listing, context_id, self.factor(state), tools)
        if self._size_cache is not None and self._size_cache[0] == key:
            return self._size_cache[1]
        size = self.measure(self._build(state, settings, skills, tools))
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
