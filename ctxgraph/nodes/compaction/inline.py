"""Inline compaction: summarize, verify and commit a plan within the step, or give up safely.

The sync and async paths share one sans-I/O attempt (``_Attempt``), driven by one flow
(``InlineCompactor.compact``) whose only I/O is the summary call and the archive write.
After the summary calls the attempt emits ``compaction.summarized`` with what they cost,
and its update adds that to ``model_usage``, whatever the outcome (the provider billed
the calls either way).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig

from ctxgraph.nodes.compaction.commit import CompactionCommit
from ctxgraph.nodes.compaction.errors import CompactionError
from ctxgraph.nodes.compaction.events import emit
from ctxgraph.nodes.compaction.fallback import DEGRADED, degraded_sections
from ctxgraph.nodes.compaction.job_results import take_discarded
from ctxgraph.nodes.compaction.plan import Plan
from ctxgraph.nodes.compaction.planner import CompactionPlanner, Finished
from ctxgraph.nodes.compaction.summarizer import SummaryError, SummaryWriter
from ctxgraph.state.sans_io import Flow, io
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.state.usage import CallUsage, calls_event_fields, usage_update
from ctxgraph.store.persistence.archive import ArchiveRecord

logger = logging.getLogger("ctxgraph.compaction")

GiveUp = Callable[[Plan, str, int], dict[str, Any]]
"""Returns the update of a refused compaction, given its plan, the reason, and how many
refusals it counts (0 when no summary was paid for)."""


class InlineCompactor:
    """Compacts within the step: one summary, checked, finished by the planner, committed."""

    def __init__(
        self,
        planner: CompactionPlanner,
        writer: SummaryWriter,
        commit: CompactionCommit,
        counter: TokenCounter,
    ) -> None:
        """Finish with ``planner``, summarize with ``writer``, commit with ``commit``.

        ``counter`` names the largest message when a request cannot fit.
        """
        self._planner = planner
        self._writer = writer
        self._commit = commit
        self._counter = counter

    def compact(
        self, plan: Plan, window: Sequence[AnyMessage], config: RunnableConfig
    ) -> Flow[dict[str, Any]]:
        """Compaction of ``plan``; ``window`` is the thread's working window.

        A flow (``ctxgraph.state.sans_io``): the node's sync and async paths drive it.
        """
        attempt = self._attempt(plan)
        if attempt.summary_due():
            writer = self._writer
            try:
                sections = yield from io(
                    writer.write,
                    writer.awrite,
                    plan.job,
                    plan.settings,
                    plan.check,
                    usage=attempt.usage,
                )
            except SummaryError as error:
                attempt.unsummarized(error)
            else:
                attempt.summarized(sections)
        if (record := attempt.record()) is not None:
            prepared = yield from self._commit.prepare(
                plan.archive, record, plan.old, window, config
            )
            attempt.prepared(prepared)
        return attempt.update()

    def _attempt(self, plan: Plan) -> _Attempt:
        return _Attempt(plan, self._planner, self.give_up)

    def give_up(self, plan: Plan, reason: str, attempts: int = 1) -> dict[str, Any]:
        """Keep the old summary and every message; fail only if the request cannot fit.

        The refusal is counted in ``compaction_retry`` (``attempts``), so the next attempt
        keeps fewer messages and budgets for the largest summary (see
        ``CompactionPlanner.split``). A compaction skipped before any summary call counts
        0: its reason is kept, and the next attempt estimates as this one did, on a
        window that has grown.

        Raises:
            CompactionError: the request is over the main model's input window.

        """
        logger.warning("compaction skipped, state left as it was: %s", reason)
        if plan.window is not None and plan.before.tokens > plan.window:
            raise CompactionError(
                f"compaction failed ({reason}) and the request is {plan.before.tokens} tokens, "
                f"over the main model's input window of {plan.window}; "
                f"{self._largest(plan.kept + plan.old)}"
            )
        return {"compaction_retry": {"attempts": attempts, "reason": reason}}

    def _largest(self, messages: list[AnyMessage]) -> str:
        if not messages:
            return "the system prompt and tool schemas alone are too large"
        biggest = max(messages, key=self._counter.count_message)
        name = getattr(biggest, "name", None) or biggest.type
        return (
            f"the largest message is a {biggest.type} message ({name}, id {biggest.id}) "
            f"of {self._counter.count_message(biggest)} tokens"
        )


class _Attempt:
    """One inline compaction between its I/O calls: the summary call, then the archive write.

    Nothing to fold gives up at once, and so does a plan whose compacted request the size
    check would refuse whatever the summary (``Plan.unfit``): no summary is paid for only
    to be thrown away (``compaction.skipped`` says why). A summary (or the failure to
    write one) is finished
    by the planner into a record to prepare, or gives up with the reason. Preparing the
    record decides the update: the committed window, or nothing when the thread moved on.
    The summary calls' usage (``usage``, filled by the writer) is added to that update.
    """

    def __init__(self, plan: Plan, planner: CompactionPlanner, give_up: GiveUp) -> None:
        self._plan = plan
        self._planner = planner
        self._give_up = give_up
        self._finished: Finished | None = None
        self._update: dict[str, Any] | None = None
        self.usage: list[CallUsage] = []
        """One entry per answered summary call of this attempt."""
        self._reported = False
        self._reasons: tuple[str, ...] = ()
        """Why the summaries that came back were refused (a degraded or failed record)."""
        if not plan.old:
            self._update = give_up(plan, "nothing old enough to fold", 1)
        elif plan.unfit is not None:
            plan.skipped()
            self._update = give_up(plan, plan.unfit, 0)

    def summary_due(self) -> bool:
        """True while the summary model has yet to be called."""
        return self._update is None and self._finished is None

    def summarized(self, sections: dict[str, str]) -> None:
        """Take the checked sections: a record to prepare, or a refusal."""
        self._report("written" if not sections.get(DEGRADED) else "degraded")
        finished = self._planner.finish(self._plan, sections)
        if isinstance(finished, str):
            self._update = self._give_up(self._plan, finished, 1)
        else:
            self._finished = finished

    def unsummarized(self, error: SummaryError) -> None:
        """No model wrote a usable summary: commit the model-free record, or give up."""
        plan = self._plan
        self._reasons = error.reasons
        if plan.settings.summary_fallback == "off":
            self._report("failed")
            self._update = self._give_up(plan, f"no usable summary ({error})", 1)
            return
        version = int(plan.mark.get("version", 0)) + 1
        try:
            sections = degraded_sections(plan.job, plan.settings, plan.check, version=version)
        except SummaryError as fallback_error:
            self._report("failed")
            self._update = self._give_up(plan, f"no usable summary ({error}; {fallback_error})", 1)
            return
        logger.warning("no usable summary (%s); committing a degraded model-free record", error)
        self.summarized(sections)

    def record(self) -> ArchiveRecord | None:
        """The archive version to prepare now; None when there is none (or it is done)."""
        if self._update is not None or self._finished is None:
            return None
        return self._finished.record

    def prepared(self, written: bool) -> None:
        """Take the archive write's outcome: False means the thread moved on meanwhile."""
        assert self._finished is not None
        self._update = self._finished.update if written else {}

    def _report(self, outcome: str) -> None:
        """Emit ``compaction.summarized`` once, with the summary calls' usage."""
        if self._reported:
            return
        self._reported = True
        plan = self._plan
        reasons = [*self._reasons, *([plan.request_note] if plan.request_note else [])]
        emit(
            "summarized",
            self._plan.archive.thread_id,
            base_version=int(self._plan.mark.get("version", 0) or 0),
            outcome=outcome,
            folded=len(self._plan.old),
            request="compact" if plan.prefix is None else "shared_prefix",
            **({"reasons": reasons} if reasons else {}),
            **calls_event_fields(self.usage),
        )

    def update(self) -> dict[str, Any]:
        """The node's state update for this attempt, adding what its model calls cost.

        The usage of job results a background step discarded under the same plan is
        added too (see ``take_discarded``).
        """
        assert self._update is not None
        calls = [*self.usage, *take_discarded(self._plan)]
        if not calls:
            return self._update
        return {**self._update, "model_usage": usage_update(*calls)}
