"""The ``compaction_worker`` graph and the job queue that feeds it (as on a LangGraph server)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph import CtxGraph
from ctxgraph.graph.compaction_worker import CompactionWorkerError, build_compaction_worker
from ctxgraph.nodes.compaction.job_queue import settings_from_values, settings_values
from ctxgraph.nodes.compaction.jobs import JobResults
from ctxgraph.state import Context, Models
from ctxgraph.state.demo_replies import demo_summary
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.persistence.archive import verify_thread
from tests.support.background_child import SETTINGS as BACKGROUND
from tests.support.scripted import is_summary_request, prompt_text

CTX = Context(user_id="u1")
SETTINGS = replace(BACKGROUND, read_only_tools=("lookup_order",))
"""A tuple-valued field too, so the trip through JSON has one to restore."""
FILLER = "The carrier confirmed the pickup window and the customs papers were filed. " * 16


def models(calls: list[int]) -> Models:
    def main(messages: list[BaseMessage]) -> AIMessage:
        assert not is_summary_request(messages)
        asked = [m for m in messages if isinstance(m, HumanMessage)][-1]
        return AIMessage(content=f"Noted: {asked.text[:30]}")

    def summary(messages: list[BaseMessage]) -> AIMessage:
        calls.append(1)
        return demo_summary(prompt_text(messages))

    return Models(
        main=ScriptedChatModel(responder=main), summary=ScriptedChatModel(responder=summary)
    )


class WorkerQueue:
    """Runs each queued job at once on the worker graph, as the server's queue would later."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.payloads: list[dict[str, Any]] = []
        self.outcomes: list[str] = []

    async def submit(self, payload: dict[str, Any]) -> str:
        self.payloads.append(json.loads(json.dumps(payload)))  # what crosses the API is JSON
        result = await self.worker.ainvoke(self.payloads[-1])
        self.outcomes.append(result["outcome"])
        return f"run-{len(self.payloads)}"


async def turns_until(graph: Any, config: Any, event: str) -> list[dict[str, Any]]:
    """Run turns until ``event`` is streamed (20 at most); returns every custom event."""
    events: list[dict[str, Any]] = []
    for n in range(1, 20):
        async for chunk in graph.astream(
            {"messages": [HumanMessage(content=f"Note {n}. {FILLER}")]},
            config,
            context=CTX,
            stream_mode="custom",
        ):
            events.append(chunk)
        if any(e["event"] == event for e in events):
            break
    return events


def test_settings_survive_the_trip_through_json() -> None:
    values = json.loads(json.dumps(settings_values(SETTINGS)))
    assert settings_from_values(values) == SETTINGS


async def test_a_queued_job_runs_on_the_worker_and_the_thread_applies_its_result() -> None:
    store = InMemoryStore()
    calls: list[int] = []
    queue = WorkerQueue(build_compaction_worker(models(calls), store=store))
    graph = CtxGraph(models(calls), SETTINGS).agent(
        checkpointer=InMemorySaver(), store=store, compaction_queue=queue
    )
    config: Any = {"configurable": {"thread_id": f"w-{uuid.uuid4().hex[:8]}"}}
    events = await turns_until(graph, config, "compaction.applied")
    names = [e["event"] for e in events]
    assert names[0] == "compaction.queued" and "compaction.applied" in names, names
    assert queue.outcomes[0] == "stored"
    assert len(calls) == 1
    payload = queue.payloads[0]
    assert payload["base_version"] == 0 and payload["previous"] is None
    assert len(payload["folded"]) == events[0]["folded"]
    state = (await graph.aget_state(config)).values
    assert state["compaction"]["version"] == 1
    assert verify_thread(store, config["configurable"]["thread_id"], state["compaction"]).ok
    # The applied result stays until a later step prunes it: applying is idempotent.
    [(_, kept)] = JobResults(store, config["configurable"]["thread_id"]).results()
    assert kept is not None and kept.base_version == 0


async def test_the_worker_needs_a_store_and_a_job() -> None:
    with pytest.raises(CompactionWorkerError, match="needs a Store"):
        await build_compaction_worker(models([])).ainvoke({"thread_id": "t", "folded": [{}]})
    with pytest.raises(CompactionWorkerError, match="needs thread_id and folded"):
        await build_compaction_worker(models([]), store=InMemoryStore()).ainvoke({})


class DownQueue:
    """A queue whose server cannot be reached."""

    async def submit(self, payload: dict[str, Any]) -> str:
        raise ConnectionError("the server's API is not reachable")


async def test_a_queue_that_refuses_the_job_leaves_it_to_a_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from ctxgraph.nodes.compaction.background import wait_for_jobs

    calls: list[int] = []
    graph = CtxGraph(models(calls), SETTINGS).agent(
        checkpointer=InMemorySaver(), store=InMemoryStore(), compaction_queue=DownQueue()
    )
    config: Any = {"configurable": {"thread_id": f"w-{uuid.uuid4().hex[:8]}"}}
    events = [e["event"] for e in await turns_until(graph, config, "compaction.started")]
    assert events[:2] == ["compaction.failed", "compaction.started"], events
    assert "cannot queue the job (ConnectionError" in caplog.text
    assert wait_for_jobs(10) == 0
    assert len(calls) == 1


ECHO = (
    "SESSION INTENT:\nThe user wants the assistant to continue the work without the folded "
    "messages.\n\nSUMMARY:\nNotes were taken.\n\nARTIFACTS:\nNone.\n\nNEXT STEPS:\nNone."
)


async def test_a_worker_job_whose_summaries_are_refused_names_its_thread_and_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryStore()
    echo = Models(
        main=ScriptedChatModel(responder=lambda _: AIMessage(ECHO)),
        summary=ScriptedChatModel(responder=lambda _: AIMessage(ECHO)),
    )
    queue = WorkerQueue(build_compaction_worker(echo, store=store))
    graph = CtxGraph(models([]), SETTINGS).agent(
        checkpointer=InMemorySaver(), store=store, compaction_queue=queue
    )
    thread = f"w-{uuid.uuid4().hex[:8]}"
    with caplog.at_level("INFO", logger="ctxgraph"):
        await turns_until(graph, {"configurable": {"thread_id": thread}}, "compaction.applied")
    lines = [record.getMessage() for record in caplog.records]
    rejected = [line for line in lines if "compaction.rejected" in line]
    assert rejected and all(f"thread={thread}" in line for line in rejected), rejected
    [degraded] = [line for line in lines if "compaction.degraded" in line]
    assert "reasons=['echo']" in degraded, degraded
    assert queue.outcomes[0] == "stored"
