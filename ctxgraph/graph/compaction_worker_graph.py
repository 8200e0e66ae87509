"""A one-node graph that runs one background compaction job, for a server's run queue.

``langgraph.json`` serves it as ``compaction_worker``. The ``ctxgraph`` graph, served by the
same server, queues a thread-less run of it with the job's snapshot as input (see
``nodes/compaction/job_queue.py``); the run takes the thread's lease, writes the summary
and stores the result in the server's Store, where the thread's next steps find it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypedDict, cast

from langchain_core.messages import AnyMessage, messages_from_dict
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from ctxgraph.nodes.compaction.background import BackgroundJobs, JobSnapshot
from ctxgraph.nodes.compaction.events import emit
from ctxgraph.nodes.compaction.job_queue import settings_from_values
from ctxgraph.nodes.compaction.plan import SummaryJob
from ctxgraph.nodes.compaction.planner import summary_check
from ctxgraph.state.models import Models
from ctxgraph.state.tokens import MessageCount, TokenCounter
from ctxgraph.store.persistence.compaction_lease import leases_for, new_holder


class CompactionWorkerError(RuntimeError):
    """The worker graph ran without a Store or without a job; the message says which."""


class CompactionWorkerInput(TypedDict, total=False):
    """The job's snapshot, as ``job_payload`` builds it."""

    thread_id: str
    base_version: int
    folded: list[dict[str, Any]]
    previous: Mapping[str, Any] | None
    request: str
    settings: dict[str, Any]
    tokens_before: int
    summary_prompt: str | None
    """The ``compact`` node's summary prompt template, when it has one."""


class CompactionWorkerOutput(TypedDict, total=False):
    """What the run did: ``stored``, ``busy`` (another job holds the lease) or ``ended``."""

    outcome: str


class CompactionWorkerState(CompactionWorkerInput, CompactionWorkerOutput, total=False):
    """Input and output of the worker graph in one state."""


CompactionWorkerGraph = CompiledStateGraph[
    CompactionWorkerState, None, CompactionWorkerInput, CompactionWorkerOutput
]


def build_compaction_worker(
    models: Models | None = None,
    *,
    store: BaseStore | None = None,
    token_counter: MessageCount | None = None,
    summary_prompt: str | None = None,
) -> CompactionWorkerGraph:
    """Compile the worker graph; ``models`` default to the environment, read at each run.

    Args:
        models: The chat models; None reads them from the environment at each run.
        store: The Store to compile with; None lets a server inject its own.
        token_counter: Counts the folded messages' tokens, as the agent graph's counter
            does; None counts with the offline tiktoken encoding.
        summary_prompt: The summary prompt of a job whose snapshot names none.

    Returns:
        The compiled worker graph.

    """
    counter = TokenCounter(count=token_counter) if token_counter is not None else None

    def run(state: CompactionWorkerState, runtime: Runtime[Any]) -> CompactionWorkerOutput:
        """Take the lease and run the job here; the result lands in the run's Store."""
        chosen_store = runtime.store
        if chosen_store is None:
            raise CompactionWorkerError(
                "the compaction worker needs a Store: run it on a LangGraph server or "
                "compile it with store=..."
            )
        if not state.get("thread_id") or not state.get("folded"):
            raise CompactionWorkerError(
                "a compaction worker run needs thread_id and folded (a job snapshot)"
            )
        thread_id = str(state["thread_id"])
        settings = settings_from_values(dict(state.get("settings") or {}))
        folded = cast(list[AnyMessage], messages_from_dict(list(state["folded"])))
        previous = state.get("previous")
        base = int(state.get("base_version", 0))
        chosen = models if models is not None else Models.from_env(os.environ)
        leases = leases_for(chosen_store)
        lease = leases.acquire(thread_id, new_holder(), settings.compaction_lease_s)
        if lease is None:
            emit("skipped_busy", thread_id, base_version=base)
            return {"outcome": "busy"}
        snapshot = JobSnapshot(
            thread_id=thread_id,
            base_version=base,
            folded=folded,
            job=SummaryJob(previous, folded, str(state.get("request") or ""), thread_id),
            settings=settings,
            check=summary_check(previous, folded, settings),
            tokens_before=int(state.get("tokens_before", 0)),
        )
        emit("started", thread_id, base_version=base, token=lease.token, folded=len(folded))
        jobs = BackgroundJobs(
            [chosen.summary_model, chosen.main],
            counter,
            prompt=state.get("summary_prompt") or summary_prompt,
        )
        stored = jobs.run_here(snapshot, lease, leases, chosen_store)
        return {"outcome": "stored" if stored else "ended"}

    builder = StateGraph(
        CompactionWorkerState,
        input_schema=CompactionWorkerInput,
        output_schema=CompactionWorkerOutput,
    )
    builder.add_node("run", run)
    builder.add_edge(START, "run")
    builder.add_edge("run", END)
    return builder.compile(store=store, name="compaction_worker")
