"""The ``compact`` node and its router: offload, then fold old messages into a verified summary."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AnyMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from ctxgraph.nodes.compaction.commit import CompactionCommit, ThreadHead
from ctxgraph.nodes.compaction.ledger import (
    MAX_ARTIFACTS,
    Ledger,
    bound_ledger,
    derive_ledger,
    empty_ledger,
    merge_ledgers,
)
from ctxgraph.nodes.compaction.offloads import Offloaded, StepOffloads
from ctxgraph.nodes.compaction.partition import partition_history
from ctxgraph.nodes.compaction.summarizer import SummaryError, SummaryJob, SummaryWriter
from ctxgraph.nodes.compaction.triggers import fired_triggers
from ctxgraph.nodes.compaction.verify import size_problems, summary_problems
from ctxgraph.nodes.offload.refs import OFFLOAD_ARGS_KEY
from ctxgraph.nodes.request_size import RequestMeasurer, RequestSize, state_key
from ctxgraph.nodes.settings import effective_settings
from ctxgraph.state.context import Context, require_context
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.messages import is_real_user_message
from ctxgraph.state.models import Models, input_window
from ctxgraph.state.settings import Settings
from ctxgraph.state.summary import CHAIN_SEED, SUMMARY_SCHEMA_VERSION
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.store.persistence.archive import ArchiveRecord, ThreadArchive, build_record

logger = logging.getLogger("ctxgraph.compaction")


class CompactionError(RuntimeError):
    """Compaction cannot proceed and the request does not fit; the message says what is big."""


@dataclass(frozen=True)
class Plan:
    """Everything one compaction attempt needs, worked out before any model call."""

    settings: Settings
    archive: ThreadArchive
    old: list[AnyMessage]
    kept: list[AnyMessage]
    previous: dict[str, Any] | None
    mark: dict[str, Any]
    before: RequestSize
    window: int | None
    ledger: Ledger
    memory_view: str

    def summary(self, sections: dict[str, str]) -> dict[str, Any]:
        """The summary record for candidate sections: schema version, sections, ledger."""
        return {"schema_version": SUMMARY_SCHEMA_VERSION, **sections, "ledger": self.ledger}

    def check(self, sections: dict[str, str]) -> list[str]:
        """Schema, size and ledger problems of candidate sections."""
        return summary_problems(self.summary(sections), self.settings)

    @property
    def job(self) -> SummaryJob:
        """The summary call's input."""
        latest = next((m for m in reversed(self.kept) if is_real_user_message(m)), None)
        request = "" if latest is None else latest.text
        return SummaryJob(self.previous, self.old, request)


class CompactNode:
    """Router and node: decides when to compact, then summarizes, verifies and commits.

    Before compaction is considered, the node offloads (see ``StepOffloads``): large user
    inputs, and once the request nears the triggers, long arguments of old tool calls.
    The router also sends the run here when only offloading has work to do; then the
    node compacts only if a trigger still fires after the offloads.
    """

    def __init__(
        self,
        models: Models,
        builder: RequestMeasurer,
        settings: Settings,
        counter: TokenCounter,
        *,
        head: ThreadHead | None = None,
    ) -> None:
        """``head`` reads the thread's saved state for the compare-and-set commit.

        Give it when the graph is compiled with a checkpointer (see
        ``ctxgraph.nodes.compaction.commit.checkpoint_head``); without it, the commit relies
        on one run per thread at a time, as a LangGraph server guarantees.
        """
        self._main = models.main
        self._commit = CompactionCommit(head)
        self._builder = builder
        self._settings = settings
        self._counter = counter
        self._writer = SummaryWriter([models.summary_model, models.main], counter)
        # The last split: the flush node and the compact node of one step split one state.
        self._split_cache: tuple[Hashable, tuple[list[AnyMessage], list[AnyMessage]]] | None = None
        self._offloads = StepOffloads(self._measure, self._fresh_measure, self.split)

    def _measure(self, state: AgentState, settings: Settings) -> RequestSize:
        return self._builder.measure_state(state, settings)

    def _fresh_measure(self, state: AgentState, settings: Settings) -> RequestSize:
        """Measured afresh: offloaded arguments change a request but not its ``state_key``."""
        return self._builder.measure(self._builder.build(state, settings))

    def _settings_for(self, runtime: Runtime[Context]) -> Settings:
        return effective_settings(require_context(runtime.context), self._settings)

    def route(self, state: AgentState, runtime: Runtime[Context]) -> Literal["compact", "model"]:
        """Send the run through ``compact`` when a trigger fires or offloading has work.

        Offloading has work when a user input is over its threshold, or when the request
        reached ``offload_args_fraction`` of a threshold and an old call has a long
        argument; both checks are cheap when there is nothing to offload.
        """
        settings = self._settings_for(runtime)
        size = self._measure(state, settings)
        window = input_window(self._main, settings.context_window)
        if fired_triggers(size, settings, window):
            return "compact"
        return "compact" if self._offloads.pending(state, settings, size, window) else "model"

    def _plan(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        before: RequestSize,
    ) -> Plan:
        settings = self._settings_for(runtime)
        previous: dict[str, Any] | None = state.get("summary")
        window = input_window(self._main, settings.context_window)
        old, kept = self.split(state, settings)
        ledger = self._ledger(previous, old, settings)
        return Plan(
            settings=settings,
            archive=ThreadArchive(_require_store(runtime.store), _thread_id(config)),
            old=old,
            kept=kept,
            previous=previous,
            mark=dict(state.get("compaction") or {}),
            before=before,
            window=window,
            ledger=ledger,
            memory_view=state.get("memory_view") or "",
        )

    def split(
        self, state: AgentState, settings: Settings
    ) -> tuple[list[AnyMessage], list[AnyMessage]]:
        """The ``(old, kept)`` split the next compaction of ``state`` will use.

        Deterministic for a given state, so the flush node hands memory extraction exactly
        the messages that compaction is about to fold.
        """
        key = (state_key(state, settings), _offloaded_arguments(state))
        if self._split_cache is not None and self._split_cache[0] == key:
            return self._split_cache[1]
        split = self._choose_split(state, settings)
        self._split_cache = (key, split)
        return split

    def _choose_split(
        self, state: AgentState, settings: Settings
    ) -> tuple[list[AnyMessage], list[AnyMessage]]:
        window = input_window(self._main, settings.context_window)
        messages = state.get("messages") or []
        expected_summary = self._expected_summary(state, settings)
        # Each refusal in a row halves the messages the next attempt starts from, so a
        # retry never repeats the split that was refused.
        keep = max(1, settings.keep_messages >> _refusals(state))
        while True:
            old, kept = partition_history(messages, keep)
            # Large kept messages (big tool results) can leave no room for the summary:
            # then keep fewer, down to the last exchange and the pinned messages.
            if keep == 1 or self._room_after(state, kept, expected_summary, settings, window):
                return old, kept
            keep = max(1, keep // 2)

    @staticmethod
    def _ledger(
        previous: dict[str, Any] | None, old: list[AnyMessage], settings: Settings
    ) -> Ledger:
        """The previous ledger plus what the folded messages add, within its bounds.

        The previous ledger may be of any stored shape (see ``read_ledger``).
        """
        merged = merge_ledgers(
            (previous or {}).get("ledger") or empty_ledger(),
            derive_ledger(old, read_only_tools=frozenset(settings.read_only_tools)),
        )
        return _bounded(merged, settings)

    def _expected_summary(self, state: AgentState, settings: Settings) -> int:
        """A cautious guess at the next summary message's size: the current one's plus 15%.

        After a refused compaction, the largest a summary may be.
        """
        largest = settings.summary_max_tokens + settings.ledger_budget
        if _refusals(state):
            return largest
        current = self._builder.summary_tokens(state, settings)
        if not current:
            return largest // 2
        return min(current + current // 7 + 100, largest)

    def _room_after(
        self,
        state: AgentState,
        kept: list[AnyMessage],
        expected_summary: int,
        settings: Settings,
        window: int | None,
    ) -> bool:
        """Whether ``kept`` plus a summary of the expected size leaves room under the triggers."""
        after: AgentState = {"messages": kept, "memory_view": state.get("memory_view") or ""}
        size = self._builder.measure(self._builder.build(after, settings))
        expected = RequestSize(tokens=size.tokens + expected_summary, messages=size.messages + 1)
        return not fired_triggers(expected, settings, window, scale=settings.compaction_target)

    def _offload_only(self, offloaded: Offloaded, settings: Settings) -> bool:
        """True when the step had offloading to do and, after it, no trigger fires."""
        window = input_window(self._main, settings.context_window)
        return offloaded.pending and not fired_triggers(offloaded.size, settings, window)

    def invoke(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Synchronous offloading, then compaction if a trigger still fires."""
        settings = self._settings_for(runtime)
        window = input_window(self._main, settings.context_window)
        offloaded = self._offloads.apply(state, settings, window, runtime.store, config)
        if self._offload_only(offloaded, settings):
            return offloaded.update()
        state = offloaded.applied(state)
        return offloaded.merged(self._compact(state, runtime, config, offloaded.size))

    async def ainvoke(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Asynchronous offloading, then compaction if a trigger still fires."""
        settings = self._settings_for(runtime)
        window = input_window(self._main, settings.context_window)
        offloaded = await self._offloads.aapply(state, settings, window, runtime.store, config)
        if self._offload_only(offloaded, settings):
            return offloaded.update()
        state = offloaded.applied(state)
        return offloaded.merged(await self._acompact(state, runtime, config, offloaded.size))

    def _compact(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        before: RequestSize,
    ) -> dict[str, Any]:
        """Synchronous compaction."""
        plan = self._plan(state, runtime, config, before)
        self._commit.audit.check(plan.archive, plan.mark)
        if not plan.old:
            return self._give_up(plan, "nothing old enough to fold")
        try:
            sections = self._writer.write(plan.job, plan.settings, plan.check)
        except SummaryError as error:
            return self._give_up(plan, f"no usable summary ({error})")
        outcome = self._finish(plan, sections)
        if isinstance(outcome, str):
            return self._give_up(plan, outcome)
        record, update = outcome
        window = state.get("messages") or []
        prepared = self._commit.prepare(plan.archive, record, plan.old, window, config)
        return update if prepared else {}

    async def _acompact(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        before: RequestSize,
    ) -> dict[str, Any]:
        """Asynchronous compaction."""
        plan = self._plan(state, runtime, config, before)
        await self._commit.audit.acheck(plan.archive, plan.mark)
        if not plan.old:
            return self._give_up(plan, "nothing old enough to fold")
        try:
            sections = await self._writer.awrite(plan.job, plan.settings, plan.check)
        except SummaryError as error:
            return self._give_up(plan, f"no usable summary ({error})")
        outcome = self._finish(plan, sections)
        if isinstance(outcome, str):
            return self._give_up(plan, outcome)
        record, update = outcome
        window = state.get("messages") or []
        prepared = await self._commit.aprepare(plan.archive, record, plan.old, window, config)
        return update if prepared else {}

    def _finish(
        self, plan: Plan, sections: dict[str, str]
    ) -> tuple[ArchiveRecord, dict[str, Any]] | str:
        """Commit material for a checked summary; a string return says why it was rejected.

        If the compacted request would not shrink or would still fire a trigger, the record
        is shrunk before the compaction is judged: the ledger's bounds are halved, step by
        step (``RECORD_SHRINK_STEPS`` at most), and the first record whose request passes
        is committed. The kept messages never change here, so memory extraction has
        already seen exactly what is folded.
        """
        problems: list[str] = []
        ledger = plan.ledger
        for step in range(RECORD_SHRINK_STEPS + 1):
            if step:
                smaller = _bounded(plan.ledger, plan.settings, halved=step)
                if smaller == ledger:
                    continue
                ledger = smaller
            summary = {**plan.summary(sections), "ledger": ledger}
            if step and summary_problems(summary, plan.settings):
                continue
            version = int(plan.mark.get("version", 0)) + 1
            record = build_record(
                version=version,
                messages=plan.old,
                summary=summary,
                previous_cursor=int(plan.mark.get("cursor", 0)),
                previous_chain_hash=str(plan.mark.get("chain_hash", CHAIN_SEED)),
            )
            mark = {
                "version": version,
                "cursor": record["cursor"],
                "checksum": record["checksum"],
                "chain_hash": record["chain_hash"],
            }
            after = self._measure(
                {
                    "messages": plan.kept,
                    "summary": summary,
                    "compaction": mark,
                    "memory_view": plan.memory_view,
                },
                plan.settings,
            )
            problems = size_problems(plan.before, after, plan.settings, plan.window)
            if not problems:
                if step:
                    logger.info("compaction record shrunk %d step(s) to fit the triggers", step)
                update = {
                    "summary": summary,
                    "compaction": mark,
                    "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *plan.kept],
                    "compaction_retry": None,
                }
                return record, update
        return "; ".join(problems)

    def _give_up(self, plan: Plan, reason: str) -> dict[str, Any]:
        """Keep the old summary and every message; fail only if the request cannot fit.

        The refusal is counted in ``compaction_retry``, so the next attempt keeps fewer
        messages and budgets for the largest summary (see ``_choose_split``).
        """
        logger.warning("compaction skipped, state left as it was: %s", reason)
        if plan.window is not None and plan.before.tokens > plan.window:
            raise CompactionError(
                f"compaction failed ({reason}) and the request is {plan.before.tokens} tokens, "
                f"over the main model's input window of {plan.window}; "
                f"{self._largest(plan.kept + plan.old)}"
            )
        return {"compaction_retry": {"attempts": 1, "reason": reason}}

    def _largest(self, messages: list[AnyMessage]) -> str:
        if not messages:
            return "the system prompt and tool schemas alone are too large"
        biggest = max(messages, key=self._counter.count_message)
        name = getattr(biggest, "name", None) or biggest.type
        return (
            f"the largest message is a {biggest.type} message ({name}, id {biggest.id}) "
            f"of {self._counter.count_message(biggest)} tokens"
        )


RECORD_SHRINK_STEPS = 4
"""How many times ``_finish`` may halve the ledger's bounds to make a compaction fit."""


def _bounded(ledger: Ledger, settings: Settings, *, halved: int = 0) -> Ledger:
    """``ledger`` within the bounds of ``settings``, each halved ``halved`` times."""
    return bound_ledger(
        ledger,
        max_tool_calls=max(1, settings.ledger_max_tool_calls >> halved),
        max_identifiers=settings.ledger_max_identifiers >> halved,
        max_constraint_tokens=settings.constraint_budget >> halved,
        max_artifacts=MAX_ARTIFACTS >> halved,
    )


def _offloaded_arguments(state: AgentState) -> int:
    """How many arguments the window's messages have offloaded, so a split is redone after.

    Offloading arguments keeps every message's id and content length, so ``state_key``
    alone would not tell the states apart.
    """
    return sum(
        len(message.additional_kwargs.get(OFFLOAD_ARGS_KEY) or ())
        for message in state.get("messages") or ()
    )


def _refusals(state: AgentState) -> int:
    """Compactions refused in a row on this thread, as ``compaction_retry`` counts them."""
    return int((state.get("compaction_retry") or {}).get("attempts", 0))


def _require_store(store: BaseStore | None) -> BaseStore:
    """The run's Store; without one, say where the Store comes from in each setup."""
    if store is None:
        raise CompactionError(
            "compaction archives folded messages in a LangGraph Store, and this run has "
            "none: pass store= to build_graph; inside a parent graph, add ctxgraph with "
            "ctxgraph.graph.as_subgraph(...) and compile the parent with store= (a "
            "LangGraph server provides one)"
        )
    return store


def _thread_id(config: RunnableConfig) -> str:
    """The run's thread id; inside a parent graph it is the parent's thread id."""
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if not isinstance(thread_id, str) or not thread_id:
        raise CompactionError(
            "compaction needs a thread: pass config={'configurable': {'thread_id': ...}} "
            f"(to the parent graph when ctxgraph runs inside one), got {thread_id!r}"
        )
    return thread_id
