"""What one compaction attempt works with: its plan, and the summary call the plan asks for.

The planner makes a ``Plan``; the summarizer, the shared-prefix request builder, the
fallback and the background jobs read it (and its ``SummaryJob``), and import nothing
of each other to do so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool

from ctxgraph.nodes.compaction.events import emit
from ctxgraph.nodes.compaction.faithfulness import DEGRADED_KEY
from ctxgraph.nodes.compaction.ledger import (
    MAX_ARTIFACTS,
    Ledger,
    bound_ledger,
    derive_ledger,
    empty_ledger,
    merge_ledgers,
)
from ctxgraph.nodes.compaction.sections import SECTIONS
from ctxgraph.nodes.compaction.verify import summary_problems
from ctxgraph.nodes.request_size import RequestSize
from ctxgraph.state.compaction_state import CompactionMark, SummaryRecord
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.messages import HIDE_FROM_UI_KEY, ORIGIN_KEY, is_real_user_message
from ctxgraph.state.settings import Settings
from ctxgraph.state.summary import SUMMARY_SCHEMA_VERSION
from ctxgraph.state.usage import CallUsage
from ctxgraph.store.persistence.archive import ThreadArchive

SUMMARY_REQUEST_ID = "ctxgraph-summary-request"
"""Id prefix of the instruction (and repair request) that ends a shared-prefix summary call."""

SUMMARY_REQUEST_ORIGIN = "summary_request"
"""``ORIGIN_KEY`` value of that message: tools outside the graph tell summary calls by it."""


def marked_request(text: str, tag: str) -> HumanMessage:
    """A summary instruction (or repair request) carrying the summary-request marker."""
    return HumanMessage(
        content=text,
        id=f"{SUMMARY_REQUEST_ID}-{tag}",
        additional_kwargs={ORIGIN_KEY: SUMMARY_REQUEST_ORIGIN, HIDE_FROM_UI_KEY: True},
    )


@dataclass(frozen=True)
class SharedPrefix:
    """A shared-prefix summary request: the main request, its tools, and the instruction."""

    messages: tuple[BaseMessage, ...]
    """The main request for the state being compacted, exactly as the main model gets it,
    up to the last folded message."""
    tools: tuple[BaseTool, ...]
    """The tools that request binds, in binding order."""
    instruction: HumanMessage
    """The last message (``marked_request``)."""
    instruction_words: str
    """The fixed words of every prompt the model may be sent (for the echo check)."""
    tool_tokens: int = 0
    """Tokens of the bound tool schemas, as counted locally (for usage counted locally)."""
    _bound: dict[int, Runnable[LanguageModelInput, BaseMessage]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def prompt(self) -> list[BaseMessage]:
        """The messages of the summary call."""
        return [*self.messages, self.instruction]

    def bound(self, model: BaseChatModel) -> Runnable[LanguageModelInput, BaseMessage]:
        """``model`` with the main request's tools bound, as the model node binds them."""
        bound = self._bound.get(id(model))
        if bound is None:
            bound = model.bind_tools(list(self.tools)) if self.tools else model
            self._bound[id(model)] = bound
        return bound

    def repair_message(self, text: str) -> HumanMessage:
        """The repair request, marked like the instruction it follows."""
        return marked_request(text, "repair")


@dataclass(frozen=True)
class SummaryJob:
    """One summary call's input: what to fold on top of which previous record."""

    previous: Mapping[str, Any] | None
    folded: Sequence[BaseMessage]
    current_request: str
    thread_id: str = ""
    """The thread the summary is for: it names the ``compaction.rejected`` events."""
    prefix: SharedPrefix | None = None
    """The shared-prefix request to send instead of the compact one, in one call."""


@dataclass(frozen=True)
class Plan:
    """Everything one compaction attempt needs, worked out before any model call."""

    settings: Settings
    archive: ThreadArchive
    old: list[AnyMessage]
    kept: list[AnyMessage]
    previous: SummaryRecord | None
    mark: CompactionMark
    before: RequestSize
    window: int | None
    ledger: Ledger
    state: AgentState = field(compare=False, repr=False)
    """The state being compacted: the compacted request is its request with the window,
    summary and mark replaced (``planner.compacted_state``)."""
    unfit: str | None = None
    """Why no split can fit, decided before any summary call (see
    ``CompactionPlanner.split``): then no summary is asked for. None when one can."""
    discarded_usage: list[CallUsage] = field(default_factory=list, compare=False)
    """The summary calls of stored job results discarded during this attempt, billed all
    the same: whichever update the attempt returns takes them into ``model_usage``."""
    prefix: SharedPrefix | None = None
    """The shared-prefix summary request (``shared_prefix.SummaryRequests``); None sends
    the compact one."""
    shown: tuple[AnyMessage, ...] = ()
    """Messages the summary request shows besides the folded ones (the kept messages of a
    shared-prefix request): evidence for the invented-success check."""
    request_note: str | None = None
    """Why the compact request is sent although a shared prefix was asked for."""

    def summary(self, sections: dict[str, str]) -> SummaryRecord:
        """The summary record for candidate sections: schema version, sections, ledger."""
        fields = {key: sections[key] for key, _ in SECTIONS if key in sections}
        record = cast(SummaryRecord, {"schema_version": SUMMARY_SCHEMA_VERSION, **fields})
        record["ledger"] = self.ledger
        if sections.get(DEGRADED_KEY):
            record["degraded"] = True
        return record

    def check(self, sections: dict[str, str]) -> list[str]:
        """Schema, size, ledger and faithfulness problems of candidate sections."""
        summary = self.summary(sections)
        return summary_problems(
            summary, self.settings, previous=self.previous, folded=self.old, shown=self.shown
        )

    def skipped(self) -> None:
        """Say that no summary is asked for, and why (``compaction.skipped``, ``unfit``)."""
        emit(
            "skipped",
            self.archive.thread_id,
            base_version=int(self.mark.get("version", 0) or 0),
            reason=self.unfit,
            folded=len(self.old),
            tokens_before=self.before.tokens,
            messages_before=self.before.messages,
        )

    @property
    def job(self) -> SummaryJob:
        """The summary call's input."""
        latest = next((m for m in reversed(self.kept) if is_real_user_message(m)), None)
        request = "" if latest is None else latest.text
        return SummaryJob(self.previous, self.old, request, self.archive.thread_id, self.prefix)

    def refolded(
        self,
        old: list[AnyMessage],
        kept: list[AnyMessage],
        *,
        shown: Sequence[AnyMessage] = (),
    ) -> Plan:
        """A copy of the plan that folds ``old`` and keeps ``kept`` (a job's snapshot).

        ``shown``: the kept messages the job's summary request showed (a shared prefix
        shows those above its last folded message).
        """
        ledger = merged_ledger(self.previous, old, self.settings)
        return replace(self, old=old, kept=kept, ledger=ledger, unfit=None, shown=tuple(shown))


def bounded(ledger: Ledger, settings: Settings, *, halved: int = 0) -> Ledger:
    """``ledger`` within the bounds of ``settings``, each halved ``halved`` times."""
    return bound_ledger(
        ledger,
        max_tool_calls=max(1, settings.ledger_max_tool_calls >> halved),
        max_identifiers=settings.ledger_max_identifiers >> halved,
        max_constraint_tokens=settings.constraint_budget >> halved,
        max_artifacts=MAX_ARTIFACTS >> halved,
    )


def merged_ledger(
    previous: Mapping[str, Any] | None, old: list[AnyMessage], settings: Settings
) -> Ledger:
    """The previous ledger plus what the folded messages add, within its bounds.

    The previous ledger may be of any stored shape (see ``read_ledger``).
    """
    merged = merge_ledgers(
        (previous or {}).get("ledger") or empty_ledger(),
        derive_ledger(old, read_only_tools=frozenset(settings.read_only_tools)),
    )
    return bounded(merged, settings)
