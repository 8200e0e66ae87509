"""Compaction decides before it pays: no summary whose result the size check would refuse.

The size check follows the trigger that fired: after the message trigger the window must
hold fewer messages (the record may be larger in tokens than the short messages it folds),
after a token trigger the request must still shrink in tokens.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import Graph, build_graph
from ctxgraph.graph.cli.compact import outcome_line
from ctxgraph.nodes.compaction.background import wait_for_jobs
from ctxgraph.nodes.compaction.node import UNFIT, Launch
from ctxgraph.nodes.compaction.planner import CompactionPlanner
from ctxgraph.nodes.compaction.render import SECTIONS
from ctxgraph.nodes.compaction.verify import size_problems
from ctxgraph.nodes.request_size import RequestSize
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_summary
from ctxgraph.state.messages import message_origin
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, count_text
from tests.support.requests import request_builder
from tests.support.scripted import is_summary_request, main_requests, prompt_text

CTX = Context(user_id="u1")
JOB_THREAD = "ctxgraph-compaction-"
"""Background jobs run in threads named ``ctxgraph-compaction-<thread id>``."""

SHORT = Settings(
    memory_extraction="off",
    memory_mode="off",
    trigger_messages=20,
    trigger_tokens=2_000,
    keep_messages=4,
)
"""The case a real local model met: short messages, a 20-message trigger, keep 4."""

REPORT_WORDS = ("quarterly", "revenue", "grew", "in", "the", "north", "while", "costs", "held")


class Summarizer:
    """A summary model that notes where each call ran (inline or in a job) and may sleep."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.threads: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, messages: list[BaseMessage]) -> AIMessage:
        with self._lock:
            self.threads.append(threading.current_thread().name)
        time.sleep(self.delay)
        return demo_summary(prompt_text(messages))

    @property
    def inline(self) -> int:
        """Calls made in the step itself (the turn waited for them)."""
        return sum(not name.startswith(JOB_THREAD) for name in self.threads)

    @property
    def in_job(self) -> int:
        """Calls made by background jobs."""
        return sum(name.startswith(JOB_THREAD) for name in self.threads)


@tool
def fetch_report(name: str, words: int) -> str:
    """Fetch a report by name, ``words`` words long."""
    return f"report {name}: " + " ".join(REPORT_WORDS[i % 9] for i in range(words))


def short_answer(messages: list[BaseMessage]) -> AIMessage:
    assert not is_summary_request(messages), "the summary model answers summary calls"
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage("The report is in.")
    asked = last.text
    if asked.startswith("Fetch "):
        words = int(asked.split()[1])
        call = {"name": "fetch_report", "args": {"name": "q3", "words": words}, "id": "c-report"}
        return AIMessage("", tool_calls=[call])
    return AIMessage(f"Noted: {asked}")


def graph_for(settings: Settings, summarizer: Summarizer) -> tuple[Graph, ScriptedChatModel]:
    main = ScriptedChatModel(responder=short_answer)
    graph = build_graph(
        models=Models(main=main, summary=ScriptedChatModel(responder=summarizer)),
        tools=[fetch_report],
        settings=settings,
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    return graph, main


def turn(graph: Graph, config: Any, text: str, events: list[dict[str, Any]]) -> None:
    for chunk in graph.stream(
        {"messages": [HumanMessage(text)]}, config, context=CTX, stream_mode="custom"
    ):
        events.append(chunk)


def request_size(messages: Sequence[BaseMessage], tools: list[dict[str, Any]]) -> RequestSize:
    """A main-model request's tokens (tool schemas included) and messages."""
    schemas = count_text(json.dumps(tools, ensure_ascii=False, sort_keys=True))
    return RequestSize(TokenCounter().count_messages(messages) + schemas, len(messages))


def named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [event for event in events if event.get("event") == f"compaction.{name}"]


def skipped_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "compaction skipped" in r.getMessage()]


# --- the message trigger: bounded window, one summary call ---------------------------------


@pytest.mark.parametrize("path", ["sync", "async"])
def test_short_messages_compact_at_the_message_trigger_with_one_summary_call(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    summarizer = Summarizer()
    graph, main = graph_for(SHORT, summarizer)
    config: Any = {"configurable": {"thread_id": f"short-{path}"}}
    events: list[dict[str, Any]] = []
    caplog.set_level(logging.INFO, logger="ctxgraph.compaction")

    for n in range(1, 10):
        turn(graph, config, f"Check order A{n}.", events)
    assert summarizer.threads == []
    last = main.requests[-1]
    uncompacted = request_size(
        [*last, *graph.get_state(config).values["messages"][-1:], HumanMessage("Check order A10.")],
        main.tool_requests[-1],
    )
    assert uncompacted.messages == SHORT.trigger_messages

    if path == "sync":
        turn(graph, config, "Check order A10.", events)
    else:
        asyncio.run(
            graph.ainvoke({"messages": [HumanMessage("Check order A10.")]}, config, context=CTX)
        )

    # One summary call, and it was committed: no paid-for summary thrown away.
    assert len(summarizer.threads) == 1
    state = graph.get_state(config).values
    assert state["compaction"]["version"] == 1
    assert state.get("compaction_retry") is None
    assert skipped_lines(caplog) == []
    # The compacted request carries the record and holds fewer messages than the trigger,
    # although it is larger in tokens than the short messages it replaced.
    compacted = main_requests(main)[-1]
    assert any(message_origin(m) == "summary" for m in compacted)
    after = request_size(compacted, main.tool_requests[-1])
    assert after.messages < SHORT.trigger_messages
    assert after.tokens > uncompacted.tokens
    assert after.tokens < SHORT.trigger_tokens


# --- nothing can fit: no summary call at all -----------------------------------------------


def test_a_compaction_that_cannot_fit_makes_no_summary_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings(
        memory_extraction="off",
        memory_mode="off",
        trigger_tokens=1_400,
        summary_max_tokens=300,
        ledger_max_tokens=300,
        keep_messages=2,
        offload_tokens=0,  # the report stays in the window
        context_window=100_000,
    )
    summarizer = Summarizer()
    graph, main = graph_for(settings, summarizer)
    config: Any = {"configurable": {"thread_id": "unfit"}}
    events: list[dict[str, Any]] = []
    caplog.set_level(logging.INFO, logger="ctxgraph.compaction")

    turn(graph, config, "Hello there.", events)
    # The report alone fires the token trigger, and it is in the exchange every split
    # keeps (the latest request's tool run).
    turn(graph, config, "Fetch 1500 words of the q3 report.", events)

    assert summarizer.threads == []
    assert not any(is_summary_request(request) for request in main.requests)
    [skipped] = named(events, "skipped")
    reason = skipped["reason"]
    assert reason.startswith("the compacted request would not fit, so no summary was asked for:")
    assert "the compacted request still fires tokens" in reason
    assert skipped["tokens_before"] >= settings.trigger_tokens
    # The usual refusal line, and its reason kept in the state without counting a refusal:
    # the next attempt estimates as this one did, on a larger window.
    assert skipped_lines(caplog)[0] == f"compaction skipped, state left as it was: {reason}"
    state = graph.get_state(config).values
    assert state["compaction_retry"]["attempts"] == 0
    assert state["compaction_retry"]["reason"].startswith("the compacted request would not fit")
    assert state.get("compaction") is None
    assert len(state["messages"]) == 6  # nothing was folded

    # Once a new request leaves the report among the old messages, a split fits: one
    # summary call, committed.
    turn(graph, config, "Thanks.", events)
    assert len(summarizer.threads) == 1
    state = graph.get_state(config).values
    assert state["compaction"]["version"] == 1
    assert state.get("compaction_retry") is None


def test_a_background_job_that_cannot_fit_is_not_started() -> None:
    settings = Settings(
        memory_extraction="off",
        memory_mode="off",
        compaction_mode="background",
        trigger_tokens=1_400,
        summary_max_tokens=300,
        ledger_max_tokens=300,
        keep_messages=2,
        offload_tokens=0,
        context_window=100_000,
    )
    summarizer = Summarizer()
    graph, _ = graph_for(settings, summarizer)
    config: Any = {"configurable": {"thread_id": "unfit-job"}}
    events: list[dict[str, Any]] = []

    turn(graph, config, "Hello there.", events)
    # Past background_fraction of the token trigger, below the trigger: a job is due, but
    # folding the greeting for a record would not make the request smaller.
    turn(graph, config, "Fetch 1000 words of the q3 report.", events)
    turn(graph, config, "Thanks.", events)
    wait_for_jobs(5)

    assert summarizer.threads == []
    assert named(events, "started") == []
    [skipped] = named(events, "skipped")
    assert "the request would not shrink" in skipped["reason"]
    job = graph.get_state(config).values["compaction_job"]
    assert job["state"] == UNFIT
    assert job["base_version"] == 0


# --- background: a valid result is applied, no turn summarizes inline -----------------------


def test_background_short_messages_apply_the_job_and_never_summarize_inline() -> None:
    """The case where a discarded job made two turns in a row wait for an inline summary."""
    settings = Settings(
        memory_extraction="off",
        memory_mode="off",
        compaction_mode="background",
        trigger_messages=20,
        keep_messages=4,
    )
    summarizer = Summarizer(delay=1.5)
    graph, _ = graph_for(settings, summarizer)
    config: Any = {"configurable": {"thread_id": "short-bg"}}
    events: list[dict[str, Any]] = []

    for n in range(1, 15):
        turn(graph, config, f"Check order A{n}.", events)
    wait_for_jobs(10)

    assert summarizer.inline == 0
    assert summarizer.in_job == 2
    assert named(events, "discarded") == []
    assert named(events, "skipped") == []
    applied = named(events, "applied")
    assert [event["version"] for event in applied] == [1, 2]
    # The first record is larger than the short messages it folded: the request grew in
    # tokens, and the result was applied all the same, since the message trigger fired.
    first = applied[0]
    assert first["tokens_after"] > first["tokens_before"]
    state = graph.get_state(config).values
    assert state["compaction"]["version"] == 2
    assert len(state["messages"]) < settings.trigger_messages


# --- the size rule follows the trigger that fired ------------------------------------------


def window(count: int, words: int) -> list[BaseMessage]:
    filler = " ".join(["parcel"] * words)
    messages: list[BaseMessage] = [
        HumanMessage(f"Turn {n}: {filler}", id=f"h{n}")
        if n % 2 == 0
        else AIMessage(f"Answer {n}: {filler}", id=f"a{n}")
        for n in range(count)
    ]
    return [*messages, HumanMessage("What now?", id="latest")]


def sections(tokens: int) -> dict[str, str]:
    """Four sections of about ``tokens`` tokens in all."""
    text = " ".join(["record"] * (tokens // len(SECTIONS)))
    return {key: text for key, _ in SECTIONS}


def test_size_problems_follow_the_trigger_that_fired() -> None:
    settings = Settings(trigger_tokens=1_000, trigger_messages=20, summary_max_tokens=500)
    # The message trigger fired: fewer messages is what counts, tokens may grow.
    assert size_problems(RequestSize(300, 20), RequestSize(400, 6), settings, None) == []
    assert size_problems(RequestSize(300, 20), RequestSize(200, 20), settings, None) == [
        "the window would not shrink (20 -> 20 messages)",
        "the compacted request still fires messages 20 >= 20",
    ]
    # The token trigger fired: the request must shrink in tokens.
    assert size_problems(RequestSize(1_100, 8), RequestSize(1_100, 3), settings, None) == [
        "the request would not shrink (1100 -> 1100 tokens)",
        "the compacted request still fires tokens 1100 >= 1000",
    ]
    # Below the triggers, a background job's result relieves what started the job (at
    # background_fraction of a trigger); a compaction nothing asked for must shrink.
    background = Settings(
        trigger_tokens=1_000,
        trigger_messages=20,
        summary_max_tokens=500,
        compaction_mode="background",
        background_fraction=0.7,
    )
    assert size_problems(RequestSize(300, 15), RequestSize(500, 6), background, None) == []
    assert size_problems(RequestSize(800, 8), RequestSize(850, 3), background, None) == [
        "the request would not shrink (800 -> 850 tokens)"
    ]
    assert size_problems(RequestSize(300, 8), RequestSize(350, 3), settings, None) == [
        "the request would not shrink (300 -> 350 tokens)"
    ]
    # Either way the compacted request must fire no trigger.
    assert size_problems(RequestSize(300, 20), RequestSize(1_200, 6), settings, None) == [
        "the compacted request still fires tokens 1200 >= 1000"
    ]


@pytest.mark.parametrize("fired", ["tokens", "messages"])
def test_a_record_larger_than_what_it_folds_passes_only_after_the_message_trigger(
    fired: str,
) -> None:
    # 17 messages of about 100 tokens: a record of 1,150 tokens is larger than the
    # messages the split folds.
    settings = Settings(
        memory_extraction="off",
        memory_mode="off",
        keep_messages=12,
        compaction_target=0.85,  # room for the 12 kept messages
        summary_max_tokens=1_200,
        trigger_tokens=1_500 if fired == "tokens" else 18_000,
        trigger_messages=18 if fired == "messages" else 60,
    )
    planner = CompactionPlanner(
        ScriptedChatModel(script=["unused"]), request_builder([], TokenCounter())
    )
    state: Any = {"messages": window(16, 100)}
    before = planner.measure(state, settings)
    assert before.messages >= settings.trigger_messages or before.tokens >= 1_500
    plan = planner.plan(state, settings, InMemoryStore(), "t", before)
    assert plan.old and plan.unfit is None
    folded = TokenCounter().count_messages(plan.old)

    finished = planner.finish(plan, sections(1_150))

    if fired == "tokens":
        assert isinstance(finished, str)
        assert finished.startswith(f"the request would not shrink ({before.tokens} -> ")
        # A record smaller than what it folds passes the same plan.
        small = planner.finish(plan, sections(folded // 4))
        assert not isinstance(small, str), small
        assert small.after.tokens < before.tokens
    else:
        assert not isinstance(finished, str), finished
        assert finished.after.tokens > before.tokens
        assert finished.after.messages < before.messages


def test_threads_compact_says_why_no_job_started() -> None:
    reason = "the compacted request would not fit, so no summary was asked for: ..."
    line, status = outcome_line("T", Launch(UNFIT, reason=reason), 5.0)
    assert (line, status) == (f"thread T: no compaction job started: {reason}", 0)
