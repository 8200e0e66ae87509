"""The compaction planner: which messages leave the window, and the record that replaces them.

The ``flush`` node and the ``compact`` node are given one planner, so memory extraction
sees exactly the messages that compaction is about to fold.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.store.base import BaseStore

from ctxgraph.nodes.compaction.ledger import Ledger
from ctxgraph.nodes.compaction.partition import partition_history
from ctxgraph.nodes.compaction.plan import Plan, bounded, merged_ledger
from ctxgraph.nodes.compaction.render import SECTIONS, render_sections
from ctxgraph.nodes.compaction.summarizer import Check
from ctxgraph.nodes.compaction.triggers import fired_triggers
from ctxgraph.nodes.compaction.verify import size_problems, summary_problems
from ctxgraph.nodes.offload.refs import OFFLOAD_ARGS_KEY
from ctxgraph.nodes.request_size import RequestMeasurer, RequestSize, state_key
from ctxgraph.state.compaction_state import CompactionMark, SummaryRecord
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.models import input_window
from ctxgraph.state.settings import Settings
from ctxgraph.state.summary import CHAIN_SEED, SUMMARY_SCHEMA_VERSION
from ctxgraph.state.tokens import count_text
from ctxgraph.store.persistence.archive import ArchiveRecord, ThreadArchive, build_record

logger = logging.getLogger("ctxgraph.compaction")

MESSAGE_ROOM = 0.85
"""After compacting, the request should hold at most this fraction of ``trigger_messages``
(``Settings.compaction_target`` is the token triggers' fraction)."""

RECORD_SHRINK_STEPS = 4
"""How many times ``finish`` may halve the ledger's bounds to make a compaction fit."""

Split = tuple[list[AnyMessage], list[AnyMessage]]
"""``(old, kept)``: the messages a compaction folds, and the ones it keeps verbatim."""

FILLER_WORD = "note"
"""The word a stand-in record's sections repeat (one token each), to be measured."""


@dataclass(frozen=True)
class _Choice:
    """A split, and why even it cannot fit (None when it can)."""

    split: Split
    unfit: str | None = None


@dataclass(frozen=True)
class Finished:
    """The commit material of a checked summary."""

    record: ArchiveRecord
    """The archive version to prepare."""
    update: dict[str, Any]
    """The state update that commits it."""
    after: RequestSize
    """The size of the compacted request."""


class CompactionPlanner:
    """Decides which messages leave the window, and builds and finishes compaction plans."""

    def __init__(self, main: BaseChatModel, builder: RequestMeasurer) -> None:
        """Measure requests with ``builder``; ``main``'s input window caps the triggers."""
        self._main = main
        self._builder = builder
        # The last split: the flush node and the compact node of one step split one state.
        self._split_cache: tuple[Hashable, _Choice] | None = None

    def window(self, settings: Settings) -> int | None:
        """The main model's input window under ``settings`` (None when unknown)."""
        return input_window(self._main, settings.context_window)

    def measure(self, state: AgentState, settings: Settings) -> RequestSize:
        """The size of the request for ``state`` (cached by the request builder)."""
        return self._builder.measure_state(state, settings)

    def fresh_measure(self, state: AgentState, settings: Settings) -> RequestSize:
        """Measured afresh: offloaded arguments change a request but not its ``state_key``."""
        return self._builder.measure(self._builder.build(state, settings))

    def plan(
        self,
        state: AgentState,
        settings: Settings,
        store: BaseStore,
        thread_id: str,
        before: RequestSize,
    ) -> Plan:
        """The plan of a compaction of ``state`` on ``thread_id``, whose request is ``before``."""
        previous: SummaryRecord | None = state.get("summary")
        choice = self._choice(state, settings)
        old, kept = choice.split
        return Plan(
            settings=settings,
            archive=ThreadArchive(store, thread_id),
            old=old,
            kept=kept,
            previous=previous,
            mark={**(state.get("compaction") or {})},
            before=before,
            window=self.window(settings),
            ledger=merged_ledger(previous, old, settings),
            state=state,
            unfit=choice.unfit,
        )

    def split(self, state: AgentState, settings: Settings) -> Split:
        """The ``(old, kept)`` split the next compaction of ``state`` will use.

        Deterministic for a given state, so the flush node hands memory extraction exactly
        the messages that compaction is about to fold. It is chosen before any summary
        call, by an estimate of each candidate's compacted request (see ``estimate``):
        the first that the size check would accept and that leaves room under every
        token trigger at ``compaction_target`` (and under the message trigger at
        ``MESSAGE_ROOM``) wins, keeping fewer messages each time, down to
        the last exchange and the pinned messages. With none under the target, the one
        keeping fewest that the size check accepts. When the size check would refuse
        every one, the plan says why (``Plan.unfit``) and no summary is asked for.
        """
        return self._choice(state, settings).split

    def _choice(self, state: AgentState, settings: Settings) -> _Choice:
        key = (state_key(state, settings), _offloaded_arguments(state))
        if self._split_cache is not None and self._split_cache[0] == key:
            return self._split_cache[1]
        choice = self._choose(state, settings)
        self._split_cache = (key, choice)
        return choice

    def _choose(self, state: AgentState, settings: Settings) -> _Choice:
        window = self.window(settings)
        messages = state.get("messages") or []
        before = self.fresh_measure(state, settings)
        sections = self._expected_sections(state, settings)
        # Each refusal in a row halves the messages the next attempt starts from, so a
        # retry never repeats the split that was refused.
        keep = max(1, settings.keep_messages >> refusals(state))
        accepted: _Choice | None = None
        while True:
            old, kept = partition_history(messages, keep)
            problems: list[str] = []
            if old:
                after = self.estimate(state, settings, (old, kept), sections)
                problems = size_problems(before, after, settings, window)
                if not problems:
                    accepted = _Choice((old, kept))
                    # Large kept messages (big tool results) can leave no room for the
                    # next turns: then keep fewer, down to the last exchange and the pinned
                    # ones. Messages come a few per turn, whatever their size: their
                    # trigger keeps a fixed room (MESSAGE_ROOM).
                    if not fired_triggers(
                        after,
                        settings,
                        window,
                        scale=settings.compaction_target,
                        messages_scale=MESSAGE_ROOM,
                    ):
                        return accepted
            if keep == 1:
                break
            keep = max(1, keep // 2)
        if accepted is not None or not problems:
            return accepted or _Choice((old, kept))
        return _Choice(
            (old, kept),
            unfit=f"the compacted request would not fit, so no summary was asked for: "
            f"{'; '.join(problems)} (estimated folding {len(old)} and keeping {len(kept)} "
            f"messages, with a {sections}-token summary)",
        )

    def estimate(
        self, state: AgentState, settings: Settings, split: Split, sections: int
    ) -> RequestSize:
        """The compacted request of ``state`` for ``split``, estimated before any summary.

        The record is the ledger the split will merge, rendered as it will be, with
        stand-in sections of ``sections`` tokens; it is measured with the kept messages
        as the main model's request, as ``finish`` measures the real one.

        Args:
            state: The thread's state.
            settings: The run's settings.
            split: ``(old, kept)``: what the compaction folds and keeps.
            sections: The tokens the summary's four sections are expected to take.

        Returns:
            The estimated size of the compacted request.

        """
        old, kept = split
        ledger = merged_ledger(state.get("summary"), old, settings)
        version = int((state.get("compaction") or {}).get("version", 0)) + 1
        record = stand_in_record(ledger, sections)
        after = compacted_state(state, kept, record, {"version": version})
        # Built afresh: the measure cache keys a summary by its mark's checksum.
        return self._builder.measure(self._builder.build(after, settings))

    @staticmethod
    def _expected_sections(state: AgentState, settings: Settings) -> int:
        """A cautious guess at the next summary's sections, in tokens.

        The current sections plus 15% and 100; half of ``summary_max_tokens`` before the
        first compaction; after a refused compaction, the most they may be.
        """
        largest = settings.summary_max_tokens
        previous = state.get("summary")
        if refusals(state):
            return largest
        if not previous:
            return largest // 2
        current = count_text(render_sections(previous))
        return min(current + current // 7 + 100, largest)

    def finish(self, plan: Plan, sections: dict[str, str]) -> Finished | str:
        """Commit material for a checked summary; a string return says why it was rejected.

        If the size check refuses the compacted request (``size_problems``: it would not
        bring down what pressed, or would still fire a trigger), the record is shrunk
        before the compaction is judged: the ledger's bounds are halved, step by
        step (``RECORD_SHRINK_STEPS`` at most), and the first record whose request passes
        is committed. The kept messages never change here, so memory extraction has
        already seen exactly what is folded.
        """
        problems: list[str] = []
        ledger = plan.ledger
        for step in range(RECORD_SHRINK_STEPS + 1):
            if step:
                smaller = bounded(plan.ledger, plan.settings, halved=step)
                if smaller == ledger:
                    continue
                ledger = smaller
            summary: SummaryRecord = {**plan.summary(sections), "ledger": ledger}
            if step and summary_problems(
                summary, plan.settings, previous=plan.previous, folded=plan.old, shown=plan.shown
            ):
                continue
            finished = self._finished(plan, summary)
            problems = size_problems(plan.before, finished.after, plan.settings, plan.window)
            if not problems:
                if step:
                    logger.info("compaction record shrunk %d step(s) to fit the triggers", step)
                return finished
        return "; ".join(problems)

    def _finished(self, plan: Plan, summary: SummaryRecord) -> Finished:
        """The record, update and compacted size of committing ``summary`` for ``plan``."""
        version = int(plan.mark.get("version", 0)) + 1
        record = build_record(
            version=version,
            messages=plan.old,
            summary=summary,
            previous_cursor=int(plan.mark.get("cursor", 0)),
            previous_chain_hash=str(plan.mark.get("chain_hash", CHAIN_SEED)),
        )
        mark: CompactionMark = {
            "version": version,
            "cursor": record["cursor"],
            "checksum": record["checksum"],
            "chain_hash": record["chain_hash"],
        }
        if summary.get("degraded"):
            mark["degraded"] = True
        after = self.measure(compacted_state(plan.state, plan.kept, summary, mark), plan.settings)
        update = {
            "summary": summary,
            "compaction": mark,
            "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *plan.kept],
            "compaction_retry": None,
            "compaction_job": None,
        }
        return Finished(record=record, update=update, after=after)


def compacted_state(
    state: AgentState, kept: list[AnyMessage], summary: SummaryRecord, mark: CompactionMark
) -> AgentState:
    """``state`` as a compaction leaves it: the window, the summary and the mark replaced.

    Every other key stays, so the request is built from it as the main model will get it:
    each part reads its own state (memory, active skills, delegations, calibration), and
    the tools are those the gates bind for it (the kept unlocks, ``read_history`` once
    the mark has a version).
    """
    return {**state, "messages": kept, "summary": summary, "compaction": mark}


def stand_in_record(ledger: Ledger, sections: int) -> SummaryRecord:
    """A record to measure before any summary: ``ledger`` and ``sections`` tokens of text."""
    words = max(1, sections // len(SECTIONS))
    text = " ".join([FILLER_WORD] * words)
    record = cast(
        SummaryRecord,
        {"schema_version": SUMMARY_SCHEMA_VERSION, **{key: text for key, _ in SECTIONS}},
    )
    record["ledger"] = ledger
    return record


def summary_check(
    previous: Mapping[str, Any] | None,
    folded: list[AnyMessage],
    settings: Settings,
    shown: tuple[AnyMessage, ...] = (),
) -> Check:
    """The check a job's candidate sections must pass: the ``Plan.check`` of its snapshot."""
    ledger = merged_ledger(previous, folded, settings)

    def check(sections: dict[str, str]) -> list[str]:
        summary = {"schema_version": SUMMARY_SCHEMA_VERSION, **sections, "ledger": ledger}
        return summary_problems(summary, settings, previous=previous, folded=folded, shown=shown)

    return check


def refusals(state: AgentState) -> int:
    """Compactions refused in a row on this thread, as ``compaction_retry`` counts them."""
    return int((state.get("compaction_retry") or {}).get("attempts", 0))


def _offloaded_arguments(state: AgentState) -> int:
    """How many arguments the window's messages have offloaded, so a split is redone after.

    Offloading arguments keeps every message's id and content length, so ``state_key``
    alone would not tell the states apart.
    """
    return sum(
        len(message.additional_kwargs.get(OFFLOAD_ARGS_KEY) or ())
        for message in state.get("messages") or ()
    )
