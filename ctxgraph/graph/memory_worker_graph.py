"""A one-node graph that runs queued memory extractions, for a server to schedule.

It processes the items ``memory_extraction="deferred"`` leaves, and those a background
extraction left queued when its process stopped.
"""

from __future__ import annotations

import os
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from ctxgraph.nodes.memory.extract import MemoryExtractor
from ctxgraph.nodes.memory.worker import process_pending, processed_usage
from ctxgraph.state.models import Models
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import MessageCount, TokenCounter
from ctxgraph.state.usage import UsageTotals
from ctxgraph.store.memory.ranking import Ranker
from ctxgraph.store.memory.repository import RepositoryFactory


class WorkerStoreError(RuntimeError):
    """The worker graph ran without a Store, so there is no queue to process."""


class WorkerInput(TypedDict, total=False):
    """Input of a worker run: ``force`` ignores the quiet period."""

    force: bool


class WorkerOutput(TypedDict, total=False):
    """What a worker run did: items processed, their threads, facts stored, model usage."""

    processed: int
    threads: list[str]
    stored: int
    model_usage: UsageTotals
    """The memory model's tokens over the processed items (per role, as a thread keeps)."""


class WorkerState(WorkerInput, WorkerOutput, total=False):
    """Input and output of the worker graph in one state."""


WorkerGraph = CompiledStateGraph[WorkerState, None, WorkerInput, WorkerOutput]


def build_worker_graph(
    models: Models | None = None,
    settings: Settings | None = None,
    *,
    store: BaseStore | None = None,
    extraction_prompt: str | None = None,
    ranker: Ranker | None = None,
    token_counter: MessageCount | None = None,
) -> WorkerGraph:
    """Compile the worker graph, on ``store`` when given (a LangGraph server injects its own).

    ``models`` and ``settings`` default to the environment, read when a run starts (not
    when the graph is built), so a server can load the graph before a model is configured;
    such a run then fails with the one-line ``ModelConfigError`` message.

    Args:
        models: The chat models; None reads them from the environment at each run.
        settings: The settings; None reads them from the environment at each run.
        store: The Store to compile with; None lets a server inject its own.
        extraction_prompt: Replaces ``EXTRACTION_PROMPT``, as the agent graph's memory
            part does (``ctxgraph.CtxGraph`` passes its own).
        ranker: Orders the stored facts extraction reads, as the agent graph's.
        token_counter: Counts a call's tokens when the provider reports none.

    Returns:
        The compiled worker graph.

    """
    counter = TokenCounter(count=token_counter) if token_counter is not None else None

    def process(state: WorkerState, runtime: Runtime[Any]) -> WorkerOutput:
        """Run the due pending extractions (all of them with ``force``) on the run's Store."""
        store = runtime.store
        if store is None:
            raise WorkerStoreError(
                "the memory worker needs a Store: compile it with store=... or run it on a "
                "LangGraph server, which provides one"
            )
        chosen_models = models if models is not None else Models.from_env(os.environ)
        chosen_settings = settings if settings is not None else Settings.from_env(os.environ)
        repositories = (
            None if ranker is None else RepositoryFactory(ranker=ranker, settings=chosen_settings)
        )
        done = process_pending(
            store,
            MemoryExtractor(chosen_models.memory_model, extraction_prompt, counter=counter),
            threshold=chosen_settings.confidence_threshold,
            quiet_seconds=0.0 if state.get("force") else chosen_settings.memory_quiet_seconds,
            repositories=repositories,
        )
        return {
            "processed": len(done),
            "threads": [item.thread_id for item, _ in done],
            "stored": sum(len(result.stored) for _, result in done),
            "model_usage": processed_usage(done),
        }

    builder = StateGraph(WorkerState, input_schema=WorkerInput, output_schema=WorkerOutput)
    builder.add_node("process", process)
    builder.add_edge(START, "process")
    builder.add_edge("process", END)
    return builder.compile(store=store, name="memory_worker")
