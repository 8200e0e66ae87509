"""The compaction seams: a caller's summary prompt and token counter reach every summary call.

``CompactNode(summary_prompt=...)`` replaces ``SUMMARY_PROMPT`` inline, in background jobs
of this process and in jobs queued for the ``compaction_worker`` graph; the background jobs
count with the node's own counter. The summary writer's sync and async paths make the same
calls (one plan, two I/O calls).
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph.compaction_worker import build_compaction_worker
from ctxgraph.nodes.compaction.background import wait_for_jobs
from ctxgraph.nodes.compaction.jobs import JobResults
from ctxgraph.nodes.compaction.node import CompactNode
from ctxgraph.nodes.compaction.plan import SummaryJob
from ctxgraph.nodes.compaction.summarizer import (
    SUMMARY_SYSTEM,
    SummaryError,
    SummaryWriter,
)
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.prompt_template import PromptTemplateError
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter
from tests.support.requests import request_builder
from tests.support.scripted import is_summary_request, summary_text

CTX = Context(user_id="u1")
INLINE = Settings(trigger_messages=6, keep_messages=2, memory_extraction="off")
BACKGROUND = Settings(
    trigger_messages=14,
    keep_messages=2,
    memory_extraction="off",
    compaction_mode="background",
    background_fraction=0.5,
    background_wait_s=0,
)
"""A job starts at 7 request messages; the trigger fires at 14."""
TEMPLATE = (
    "CUSTOM HANDOFF\n"
    "Before: {previous_summary}\n"
    "Folded:\n{folded}\n"
    "Asked: {current_request}\n"
    "At most {max_tokens} tokens."
)
ANSWER = summary_text("Track the parcels.", "Notes 1 to 3 were taken.")
FILLER = "The carrier confirmed the pickup window and the customs papers were filed. " * 4


def note(n: int) -> str:
    """The user's message of turn ``n``."""
    return f"Note {n}: parcel P-{n}. {FILLER}".strip()


def window(turns: int) -> list[AnyMessage]:
    """``turns`` user notes, each answered."""
    messages: list[AnyMessage] = []
    for n in range(1, turns + 1):
        messages.append(HumanMessage(content=note(n), id=f"h{n}"))
        messages.append(AIMessage(content=f"Noted {n}.", id=f"a{n}"))
    return messages


def summarizer() -> ScriptedChatModel:
    """A summary model that always answers a well-formed summary, recording each request."""
    return ScriptedChatModel(responder=lambda messages: AIMessage(content=ANSWER))


def main_model() -> ScriptedChatModel:
    def reply(messages: list[BaseMessage]) -> AIMessage:
        assert not is_summary_request(messages)
        return AIMessage(content="ok")

    return ScriptedChatModel(responder=reply)


def compact_node(
    summary: ScriptedChatModel,
    settings: Settings,
    *,
    counter: TokenCounter | None = None,
    prompt: Any = TEMPLATE,
    queue: Any = None,
) -> CompactNode:
    counter = counter if counter is not None else TokenCounter()
    return CompactNode(
        Models(main=main_model(), summary=summary),
        request_builder([], counter),
        settings,
        counter,
        queue=queue,
        summary_prompt=prompt,
    )


def config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def expected_prompt(*, folded: str, asked: str, settings: Settings) -> list[BaseMessage]:
    """The exact messages of a first summary call made with ``TEMPLATE``."""
    human = (
        "CUSTOM HANDOFF\n"
        "Before: (none yet)\n"
        f"Folded:\n{folded}\n"
        f"Asked: {asked}\n"
        f"At most {settings.summary_max_tokens} tokens."
    )
    return [SystemMessage(content=SUMMARY_SYSTEM), HumanMessage(content=human)]


FOLDED_3 = "\n".join(f"human: {note(n)}\nassistant: Noted {n}." for n in (1, 2, 3))
"""The transcript of the first three exchanges of ``window``."""


# --- inline ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_custom_summary_prompt_reaches_the_summary_model_verbatim(kind: str) -> None:
    summary = summarizer()
    node = compact_node(summary, INLINE)
    state: AgentState = {"messages": window(4)}
    old, kept = node.planner.split(state, INLINE)
    assert [m.id for m in old] == ["h1", "a1", "h2", "a2", "h3", "a3"]
    assert [m.id for m in kept] == ["h4", "a4"]
    runtime = Runtime(context=CTX, store=InMemoryStore())
    if kind == "sync":
        update = node.invoke(state, runtime, config("seams-inline"))
    else:
        update = await node.ainvoke(state, runtime, config("seams-inline"))
    assert update["compaction"]["version"] == 1
    assert summary.requests == [expected_prompt(folded=FOLDED_3, asked=note(4), settings=INLINE)]


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("Summarize the conversation.", "lacks the placeholder(s) ['folded']"),
        ("{folded}\n{conversation}", "unknown placeholder(s) ['conversation']"),
        ("{folded", "literal braces"),
        ("{0} {folded}", "plain names"),
        (42, "must be a str template, not int"),
    ],
)
def test_a_bad_summary_prompt_fails_when_the_node_is_built(template: object, fragment: str) -> None:
    summary = summarizer()
    with pytest.raises(PromptTemplateError, match="summary_prompt") as raised:
        compact_node(summary, INLINE, prompt=template)
    assert fragment in str(raised.value)
    assert summary.requests == []


def test_the_default_prompt_is_used_without_one() -> None:
    summary = summarizer()
    node = compact_node(summary, INLINE, prompt=None)
    node.invoke({"messages": window(4)}, Runtime(context=CTX, store=InMemoryStore()), config("d"))
    [request] = summary.requests
    assert request[0] == SystemMessage(content=SUMMARY_SYSTEM)
    assert "CUSTOM HANDOFF" not in str(request[1].content)
    assert "<folded_messages>\n" + FOLDED_3 + "\n</folded_messages>" in str(request[1].content)


# --- the summary writer: one plan, two I/O calls ---------------------------------------------


def chunked_writer(template: str) -> tuple[SummaryWriter, ScriptedChatModel, ScriptedChatModel]:
    """A writer whose summary model fails every second call, so the main model stands in."""
    calls = 0

    def flaky(messages: list[BaseMessage]) -> AIMessage:
        nonlocal calls
        calls += 1
        if calls % 2 == 0:
            raise ConnectionError("summary endpoint down")
        return AIMessage(content=ANSWER)

    first = ScriptedChatModel(responder=flaky)
    fallback = ScriptedChatModel(responder=lambda messages: AIMessage(content=ANSWER))
    return SummaryWriter([first, fallback], TokenCounter(), prompt=template), first, fallback


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_chunks_and_fallbacks_all_use_the_prompt(kind: str) -> None:
    settings = replace(INLINE, summary_input_budget=1_000)
    folded = [HumanMessage(content=f"Note {n}. {FILLER * 3}", id=f"n{n}") for n in range(6)]
    writer, first, fallback = chunked_writer(TEMPLATE)
    job = SummaryJob(None, folded, "Go on.")
    if kind == "sync":
        sections = writer.write(job, settings, lambda sections: [])
    else:
        sections = await writer.awrite(job, settings, lambda sections: [])
    assert sections["summary"] == "Notes 1 to 3 were taken."
    requests = first.requests + fallback.requests
    assert len(first.requests) >= 2 and fallback.requests  # chunked, and one fallback
    for request in requests:
        assert request[0] == SystemMessage(content=SUMMARY_SYSTEM)
        assert str(request[1].content).startswith("CUSTOM HANDOFF\nBefore: ")
    # A later chunk carries the sections written so far.
    assert "Track the parcels." in str(first.requests[-1][1].content)


async def test_sync_and_async_writers_make_the_same_calls() -> None:
    settings = replace(INLINE, summary_input_budget=1_000)
    folded = [HumanMessage(content=f"Note {n}. {FILLER * 3}", id=f"n{n}") for n in range(6)]
    job = SummaryJob(None, folded, "Go on.")
    sync_writer, sync_first, sync_fallback = chunked_writer(TEMPLATE)
    async_writer, async_first, async_fallback = chunked_writer(TEMPLATE)
    assert sync_writer.write(job, settings, lambda s: []) == await async_writer.awrite(
        job, settings, lambda s: []
    )
    assert sync_first.requests == async_first.requests
    assert sync_fallback.requests == async_fallback.requests


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_every_model_failing_raises_with_each_failure(kind: str) -> None:
    broken = ScriptedChatModel(script=[ConnectionError("down")])
    unusable = ScriptedChatModel(script=["no sections at all"])
    writer = SummaryWriter([broken, unusable], TokenCounter(), prompt=TEMPLATE)
    job = SummaryJob(None, window(1), "")
    with pytest.raises(SummaryError) as raised:
        if kind == "sync":
            writer.write(job, INLINE, lambda s: [])
        else:
            await writer.awrite(job, INLINE, lambda s: [])
    assert "down" in str(raised.value) and "lacks section(s)" in str(raised.value)


# --- background ------------------------------------------------------------------------------


class ThreadsCounter(TokenCounter):
    """A token counter that notes the threads it counts in."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def count_message(self, message: BaseMessage) -> int:
        with self._lock:
            self.threads.add(threading.current_thread().name)
        return super().count_message(message)


def test_a_background_job_uses_the_nodes_counter_and_prompt() -> None:
    summary = summarizer()
    counter = ThreadsCounter()
    node = compact_node(summary, BACKGROUND, counter=counter)
    store = InMemoryStore()
    state: AgentState = {"messages": window(4)}
    update = node.invoke(state, Runtime(context=CTX, store=store), config("seams-bg"))
    assert update["compaction_job"]["state"] == "running"
    assert wait_for_jobs(10) == 0
    assert "ctxgraph-compaction-seams-bg" in counter.threads
    result = JobResults(store, "seams-bg").ready(0)
    assert result is not None and result.folded_ids == ("h1", "a1", "h2", "a2", "h3", "a3")
    assert summary.requests == [
        expected_prompt(folded=FOLDED_3, asked=note(4), settings=BACKGROUND)
    ]


def test_run_job_summarizes_with_the_prompt() -> None:
    summary = summarizer()
    node = compact_node(summary, BACKGROUND)
    store = InMemoryStore()
    launch = node.run_job({"messages": window(4)}, store, "seams-run", wait_s=10)
    assert launch.state == "completed" and launch.result is not None
    assert summary.requests == [
        expected_prompt(folded=FOLDED_3, asked=note(4), settings=BACKGROUND)
    ]


class WorkerQueue:
    """Runs each queued job at once on the worker graph, as a server's queue would."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.payloads: list[dict[str, Any]] = []

    async def submit(self, payload: dict[str, Any]) -> str:
        self.payloads.append(json.loads(json.dumps(payload)))  # what crosses the API is JSON
        result = await self.worker.ainvoke(self.payloads[-1])
        assert result["outcome"] == "stored"
        return f"run-{len(self.payloads)}"


@pytest.mark.parametrize("prompt", [TEMPLATE, None])
async def test_a_queued_job_carries_the_prompt_to_the_worker(prompt: str | None) -> None:
    store = InMemoryStore()
    worker_summary = summarizer()
    worker = build_compaction_worker(Models(main=main_model(), summary=worker_summary), store=store)
    queue = WorkerQueue(worker)
    node = compact_node(summarizer(), BACKGROUND, prompt=prompt, queue=queue)
    state: AgentState = {"messages": window(4)}
    update = await node.ainvoke(state, Runtime(context=CTX, store=store), config("seams-q"))
    assert update["compaction_job"]["run_id"] == "run-1"
    [payload] = queue.payloads
    [request] = worker_summary.requests
    if prompt is None:
        assert "summary_prompt" not in payload
        assert "CUSTOM HANDOFF" not in str(request[1].content)
    else:
        assert payload["summary_prompt"] == TEMPLATE
        assert request == expected_prompt(folded=FOLDED_3, asked=note(4), settings=BACKGROUND)
