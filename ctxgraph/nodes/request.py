"""Assembles the exact request the main model sees, and measures it."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool

from ctxgraph.nodes.compaction.partition import repair_tool_pairs
from ctxgraph.nodes.compaction.render import render_summary
from ctxgraph.nodes.request_size import RequestSize, state_key
from ctxgraph.nodes.skills.view import NO_SKILLS, SkillParts, SkillRequests
from ctxgraph.nodes.subagents.render import delegations_message
from ctxgraph.state.calibration import factor_of, scaled
from ctxgraph.state.compaction_state import CompactionMark, SummaryRecord
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.messages import HIDE_FROM_UI_KEY, ORIGIN_KEY
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


def memory_message(view: str) -> HumanMessage:
    """The memory view as a data message: marked by origin, hidden from UIs, never stored.

    The id carries a digest of the text, so token counts cached per id stay right.
    """
    digest = hashlib.sha256(view.encode()).hexdigest()[:16]
    return HumanMessage(
        content=view,
        id=f"{MEMORY_MESSAGE_ID}-{digest}",
        additional_kwargs={ORIGIN_KEY: "memory", HIDE_FROM_UI_KEY: True},
    )


def system_message(prompt: str, listing: str) -> SystemMessage:
    """The system rules, followed by the skill listing when there is one.

    The id names the listing's digest, so token counts cached per id stay right.
    """
    if not listing:
        return SystemMessage(content=prompt, id=SYSTEM_PROMPT_ID)
    digest = hashlib.sha256(listing.encode()).hexdigest()[:16]
    return SystemMessage(content=f"{prompt}\n\n{listing}", id=f"{SYSTEM_PROMPT_ID}-{digest}")


class Request(list[BaseMessage]):
    """A built request, with the calibration factor of the state it was built for.

    ``RequestBuilder.measure`` multiplies its local count by ``factor``; a plain list of
    messages is measured as counted locally.
    """

    factor: float = 1.0


class RequestBuilder:
    """Builds the request: system rules and skill listing, memory, summary, skills, window.

    In order: ``[system rules + skill listing] + [memory view] + [summary data] + [active
    skills] + [delegation record] + working messages``. It is the ``RequestMeasurer`` the
    compaction node measures requests with.

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
        self._tool_tokens = counter.count_tools(list(tools))
        # The rendered summary of the latest mark, reused by every request until it changes.
        self._summary_cache: tuple[tuple[str, int], HumanMessage] | None = None
        # The memory message of the latest view; a turn's requests all carry the same one.
        self._memory_cache: tuple[str, HumanMessage] | None = None
        # The delegation record's message, rebuilt when the record changes.
        self._delegations_cache: tuple[str, HumanMessage | None] | None = None
        # The size of the last measured state: the router, compact and model nodes of one
        # step measure the same request.
        self._size_cache: tuple[Hashable, RequestSize] | None = None

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
        """Tokens of the bound tool schemas, sent with every request."""
        return self._tool_tokens

    def skill_parts(self, state: AgentState, settings: Settings) -> SkillParts:
        """What skills add to the request for ``state``: listing, context and tool policy."""
        return NO_SKILLS if self._skills is None else self._skills.parts(state, settings)

    def build(self, state: AgentState, settings: Settings) -> Request:
        """The messages the main model receives for ``state``, with its calibration factor."""
        window: Sequence[AnyMessage] = state.get("messages") or []
        leading = 0
        while leading < len(window) and isinstance(window[leading], SystemMessage):
            leading += 1
        skills = self.skill_parts(state, settings)
        request = Request([self._system_message(settings.system_prompt, skills.listing)])
        request.factor = self.factor(state)
        request.extend(window[:leading])
        view = state.get("memory_view")
        if view:
            request.append(self._memory_message(view))
        summary = state.get("summary")
        mark = state.get("compaction") or {}
        if summary:
            request.append(self._summary_message(summary, mark, settings))
        if skills.context is not None:
            request.append(skills.context)
        delegations = self._delegations_message(state)
        if delegations is not None:
            request.append(delegations)
        safe, _ = repair_tool_pairs(window[leading:])
        request.extend(safe)
        return request

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

    def _memory_message(self, view: str) -> HumanMessage:
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
        skills = self.skill_parts(state, settings)
        context_id = None if skills.context is None else skills.context.id
        key = (state_key(state, settings), skills.listing, context_id, self.factor(state))
        if self._size_cache is not None and self._size_cache[0] == key:
            return self._size_cache[1]
        size = self.measure(self.build(state, settings))
        self._size_cache = (key, size)
        return size

    def measure(self, request: Sequence[BaseMessage]) -> RequestSize:
        """Tokens (tool schemas included) and message count of a built request.

        A ``Request`` counts as the provider bills it (its local count times its
        calibration factor); a plain list of messages as counted locally.
        """
        factor = request.factor if isinstance(request, Request) else 1.0
        return RequestSize(tokens=scaled(self.local_tokens(request), factor), messages=len(request))

    def local_tokens(self, request: Sequence[BaseMessage]) -> int:
        """Tokens of ``request`` (tool schemas included) as counted locally, uncalibrated."""
        return self._counter.count_messages(request) + self._tool_tokens
