"""Which stored job results still apply to a thread, and discarding the ones that do not.

A discarded result's summary calls were billed all the same: ``discard`` notes their
usage on the plan of the compaction attempt that discarded it (``Plan.discarded_usage``),
and whichever update that attempt returns (a job applied, an inline compaction, a step
that starts or waits for a job) takes it with ``take_discarded`` into ``model_usage``.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AnyMessage

from ctxgraph.nodes.compaction.events import emit
from ctxgraph.nodes.compaction.jobs import JobResult, JobResults, folded_hash
from ctxgraph.nodes.compaction.plan import Plan
from ctxgraph.state.usage import CallUsage, calls_event_fields
from ctxgraph.store.persistence.archive import ThreadArchive
from ctxgraph.store.persistence.compaction_lease import CompactionLeases


def unusable(
    result: JobResult,
    plan: Plan,
    everything: list[AnyMessage],
    leases: CompactionLeases,
) -> str | None:
    """Why a stored result cannot apply (None: it can).

    ``everything`` is the window as ``repair_tool_pairs`` gives it, orphans included.
    """
    version = int(plan.mark.get("version", 0) or 0)
    if result.base_version != version:
        return (
            f"superseded: the job started from v{result.base_version} and the thread "
            f"is at v{version}"
        )
    # The token is checked where it was issued; a process that never saw a lease for
    # the thread (a server worker in another process) relies on the checks below.
    current = leases.current(plan.archive.thread_id)
    if current is not None and current.token != result.token:
        return f"stale worker: token {result.token} is no longer the thread's current token"
    return _edited(result, everything)


def _edited(result: JobResult, everything: list[AnyMessage]) -> str | None:
    """How the window changed under the result's folded messages (None: it did not)."""
    present = {str(m.id): m for m in everything}
    missing = [i for i in result.folded_ids if i not in present]
    if missing:
        return (
            f"history edited or rewound: {len(missing)} of the {len(result.folded_ids)} "
            "folded messages are no longer in the window"
        )
    if folded_hash([present[i] for i in result.folded_ids]) != result.folded_hash:
        return "history edited: a folded message changed after the job took its snapshot"
    return None


def was_applied(archive: ThreadArchive, result: JobResult) -> bool:
    """Whether the version after ``result``'s base folded exactly its messages."""
    if not result.folded_ids:
        return False
    record = archive.get(result.base_version + 1)
    return record is not None and tuple(record["event_ids"]) == result.folded_ids


def discard(
    results: JobResults,
    key: str,
    result: JobResult | None,
    reason: str,
    *,
    plan: Plan | None = None,
) -> None:
    """Delete a stored job result that cannot apply, and say why (``compaction.discarded``).

    The event carries the usage of the job's summary calls; with ``plan`` that usage is
    noted for the attempt's update (see ``take_discarded``).
    """
    results.delete(key)
    calls = result.calls if result else ()
    emit(
        "discarded",
        results.thread_id,
        base_version=result.base_version if result else None,
        token=result.token if result else None,
        reason=reason,
        **(calls_event_fields(calls) if calls else {}),
    )
    if plan is not None:
        note_discarded(plan, calls)


def note_discarded(plan: Plan, calls: Sequence[CallUsage]) -> None:
    """Keep ``calls`` (of a discarded result) for the update of the attempt ``plan`` plans."""
    plan.discarded_usage.extend(calls)


def take_discarded(plan: Plan) -> list[CallUsage]:
    """The usage noted on ``plan`` since it was last taken (each call is taken once)."""
    taken = list(plan.discarded_usage)
    plan.discarded_usage.clear()
    return taken
