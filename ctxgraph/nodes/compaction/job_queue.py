"""Background jobs as runs of the ``compaction_worker`` graph, queued on a LangGraph server.

On a server, the ``compact`` node does not start a thread: it sends the job's snapshot
(the messages to fold, the summary it starts from, the settings) as the input of a
thread-less background run of ``compaction_worker``, so the server's own run queue
carries it. The worker takes the lease, writes the summary and stores the result exactly
as a thread would (see ``graph/compaction_worker.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any, Protocol

from langchain_core.messages import BaseMessage, messages_to_dict

from ctxgraph.state.settings import Settings

WORKER_GRAPH = "compaction_worker"
"""The graph id ``langgraph.json`` gives the worker."""


class JobQueue(Protocol):
    """Sends a job's snapshot somewhere that will run it."""

    async def submit(self, payload: dict[str, Any]) -> str:
        """Queue the job; returns the id of whatever will run it."""
        ...


class ServerJobQueue:
    """Queues each job as a background run of ``compaction_worker`` on this server."""

    def __init__(self, graph_id: str = WORKER_GRAPH) -> None:
        self._graph_id = graph_id

    async def submit(self, payload: dict[str, Any]) -> str:
        """Create the run through the server's in-process client; returns its run id."""
        from langgraph_sdk import get_client

        run = await get_client().runs.create(None, self._graph_id, input=payload)
        return str(run["run_id"])


def job_payload(
    *,
    thread_id: str,
    base_version: int,
    folded: Sequence[BaseMessage],
    previous: Mapping[str, Any] | None,
    request: str,
    settings: Settings,
    tokens_before: int,
    summary_prompt: str | None = None,
) -> dict[str, Any]:
    """The worker run's input: everything the job needs, as JSON.

    ``summary_prompt`` is the ``compact`` node's summary prompt template; it is sent only
    when the node has one (the worker then summarizes with it).
    """
    payload: dict[str, Any] = {
        "thread_id": thread_id,
        "base_version": base_version,
        "folded": messages_to_dict(list(folded)),
        "previous": previous,
        "request": request,
        "settings": settings_values(settings),
        "tokens_before": tokens_before,
    }
    if summary_prompt is not None:
        payload["summary_prompt"] = summary_prompt
    return payload


def settings_values(settings: Settings) -> dict[str, Any]:
    """Every field of ``settings`` as JSON values (tuples as lists)."""
    values: dict[str, Any] = {}
    for item in fields(settings):
        value = getattr(settings, item.name)
        values[item.name] = list(value) if isinstance(value, tuple) else value
    return values


def settings_from_values(values: dict[str, Any]) -> Settings:
    """``settings_values`` read back (lists become tuples again)."""
    tuples = {item.name for item in fields(Settings) if isinstance(item.default, tuple)}
    return Settings.from_mapping(
        {name: tuple(value) if name in tuples else value for name, value in values.items()}
    )
