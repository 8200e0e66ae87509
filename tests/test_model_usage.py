"""What model calls cost: ``model_usage`` totals per role and the usage on compaction events.

Every assertion is exact: provider-reported usage is summed as reported, and a call
without a report is counted with the same token counter the graph uses, on the exact
messages the scripted model received.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph import SubagentsPart
from ctxgraph.graph import Graph, build_graph
from ctxgraph.nodes.compaction.background import wait_for_jobs
from ctxgraph.nodes.compaction.job_results import was_applied
from ctxgraph.nodes.compaction.jobs import JobResult, JobResults
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_summary
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.subagents import SubagentSpec
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.state.usage import CallUsage
from ctxgraph.store.persistence.archive import ThreadArchive
from tests.support.background_child import SETTINGS as BACKGROUND
from tests.support.scripted import is_summary_request, prompt_text

CTX = Context(user_id="u")
PADDING = "The details of this turn matter. " * 40
INLINE = Settings(trigger_messages=8, keep_messages=2, memory_extraction="off", memory_mode="off")
EXACT = (
    "SESSION INTENT: answer questions\nSUMMARY: questions asked\nARTIFACTS: none\nNEXT STEPS: go on"
)
REPORTED = {
    "input_tokens": 900,
    "output_tokens": 40,
    "total_tokens": 940,
    "input_token_details": {"cache_read": 300},
}


def reported(text: str, usage: dict[str, Any] = REPORTED) -> AIMessage:
    return AIMessage(content=text, usage_metadata=usage)


def answer_main(messages: list[BaseMessage]) -> AIMessage:
    assert not is_summary_request(messages)
    return AIMessage(f"Answer {len(messages)}.")


class Run:
    """A graph with scripted models, the custom events its turns streamed, and its state."""

    def __init__(
        self,
        summary: Callable[[list[BaseMessage]], AIMessage],
        *,
        main: Callable[[list[BaseMessage]], AIMessage] = answer_main,
        settings: Settings = INLINE,
        store: BaseStore | None = None,
    ) -> None:
        self.summary = ScriptedChatModel(responder=summary)
        self.main = ScriptedChatModel(responder=main)
        self.store = store if store is not None else InMemoryStore()
        self.graph: Graph = build_graph(
            models=Models(main=self.main, summary=self.summary),
            settings=settings,
            checkpointer=InMemorySaver(),
            store=self.store,
        )
        self.thread = f"usage-{uuid.uuid4().hex[:8]}"
        self.events: list[dict[str, Any]] = []

    @property
    def config(self) -> Any:
        return {"configurable": {"thread_id": self.thread}}

    def turn(self, n: int, context: Context = CTX) -> None:
        text = f"Question {n}: order A-{1000 + n}. {PADDING}"
        for chunk in self.graph.stream(
            {"messages": [HumanMessage(text, id=f"h{n}")]},
            self.config,
            context=context,
            stream_mode="custom",
        ):
            self.events.append(chunk)

    def until(self, event: str, first: int = 1, limit: int = 20) -> int:
        n = first
        while f"compaction.{event}" not in self.named():
            self.turn(n)
            n += 1
            assert n < first + limit, self.named()
        return n

    def named(self, event: str | None = None) -> list[Any]:
        if event is None:
            return [e["event"] for e in self.events]
        return [e for e in self.events if e["event"] == f"compaction.{event}"]

    def usage(self) -> dict[str, Any]:
        return dict(self.graph.get_state(self.config).values.get("model_usage") or {})


def totals(calls: int, inputs: int, outputs: int, cached: int, local: int) -> dict[str, int]:
    return {
        "calls": calls,
        "input_tokens": inputs,
        "output_tokens": outputs,
        "cached_tokens": cached,
        "local_calls": local,
    }


# --- inline compaction ------------------------------------------------------------------


def test_reported_summary_usage_lands_in_model_usage_and_on_the_event() -> None:
    # A summary that follows the folded turns: a constant one is refused as stale.
    run = Run(lambda messages: reported(demo_summary(prompt_text(messages)).text))
    run.until("summarized")
    [event] = run.named("summarized")
    assert run.summary.calls == 1
    assert event["thread_id"] == run.thread
    assert event["outcome"] == "written" and event["base_version"] == 0 and event["folded"] > 0
    assert {k: event[k] for k in ("model_calls", "local_calls", "usage_source")} == {
        "model_calls": 1,
        "local_calls": 0,
        "usage_source": "provider",
    }
    assert (event["input_tokens"], event["output_tokens"], event["cached_tokens"]) == (900, 40, 300)
    assert run.usage()["summary"] == totals(1, 900, 40, 300, 0)
    for n in range(30, 38):  # more compactions: the totals follow the summary calls exactly
        run.turn(n)
    calls = run.summary.calls
    assert calls == len(run.named("summarized")) >= 3
    assert run.usage()["summary"] == totals(calls, 900 * calls, 40 * calls, 300 * calls, 0)
    assert sum(e["input_tokens"] for e in run.named("summarized")) == 900 * calls


def test_unreported_summary_usage_is_counted_locally_on_the_exact_request() -> None:
    run = Run(lambda messages: AIMessage(EXACT))
    run.until("summarized")
    counter = TokenCounter()
    [request] = run.summary.requests
    expected_in = counter.count_messages(request)
    expected_out = counter.count_message(AIMessage(EXACT))
    assert expected_in > 200 and expected_out > 10
    assert run.usage()["summary"] == totals(1, expected_in, expected_out, 0, 1)
    [event] = run.named("summarized")
    assert event["usage_source"] == "local" and event["local_calls"] == 1
    assert (event["input_tokens"], event["output_tokens"]) == (expected_in, expected_out)


def test_a_repair_request_is_a_second_call_counted_on_its_own_request() -> None:
    def missing_then_fixed(messages: list[BaseMessage]) -> AIMessage:
        if "Your answer lacked" in str(messages[-1].content):
            return reported(EXACT, {"input_tokens": 1500, "output_tokens": 60, "total_tokens": 0})
        return AIMessage("SESSION INTENT: answer\nSUMMARY: asked\nARTIFACTS: none")

    run = Run(missing_then_fixed)
    run.until("summarized")
    first, repair = run.summary.requests
    assert len(repair) == len(first) + 2  # the prompt, the unusable answer, the request
    counter = TokenCounter()
    local_in = counter.count_messages(first)
    local_out = counter.count_message(
        AIMessage("SESSION INTENT: answer\nSUMMARY: asked\nARTIFACTS: none")
    )
    assert run.usage()["summary"] == totals(2, local_in + 1500, local_out + 60, 0, 1)
    [event] = run.named("summarized")
    assert event["model_calls"] == 2 and event["local_calls"] == 1
    assert event["usage_source"] == "mixed" and event["outcome"] == "written"
    assert event["input_tokens"] == local_in + 1500


def test_a_summarizer_that_always_fails_is_still_billed_and_the_record_degrades() -> None:
    def main(messages: list[BaseMessage]) -> AIMessage:
        if is_summary_request(messages):
            return AIMessage("no headings at all")
        return AIMessage(f"Answer {len(messages)}.")

    run = Run(lambda messages: reported("I refuse."), main=main)
    run.until("summarized")
    # The summary model and the main model (its fallback) each get one repair request.
    summary_calls = run.summary.calls
    main_summary_calls = sum(1 for r in run.main.requests if is_summary_request(r))
    assert (summary_calls, main_summary_calls) == (2, 2)
    [event] = run.named("summarized")
    assert event["outcome"] == "degraded" and event["model_calls"] == 4
    usage = run.usage()["summary"]
    assert usage["calls"] == 4 and usage["local_calls"] == 2  # the main model reports nothing
    assert usage["input_tokens"] == event["input_tokens"] > 2 * 900


# --- the main model ---------------------------------------------------------------------


def test_main_model_usage_adds_up_over_three_turns() -> None:
    def main(messages: list[BaseMessage]) -> AIMessage:
        n = sum(1 for m in messages if isinstance(m, HumanMessage))
        usage = {
            "input_tokens": 100 * n,
            "output_tokens": 7 * n,
            "total_tokens": 107 * n,
            "input_token_details": {"cache_read": 50 * n},
        }
        return reported(f"Answer {n}.", usage)

    run = Run(lambda messages: AIMessage(EXACT), main=main)
    for n in range(3):
        run.turn(n)
    humans = [sum(1 for m in r if isinstance(m, HumanMessage)) for r in run.main.requests]
    assert len(humans) == 3
    h = sum(humans)
    assert run.usage() == {"main": totals(3, 100 * h, 7 * h, 50 * h, 0)}


def test_unreported_main_usage_is_the_local_count_of_each_request_and_answer() -> None:
    run = Run(lambda messages: AIMessage(EXACT))
    for n in range(3):
        run.turn(n)
    counter = TokenCounter()
    requests = run.main.requests
    assert len(requests) == 3
    expected_in = sum(
        counter.count_messages(request) + counter.count_tools(tools)
        for request, tools in zip(requests, run.main.tool_requests, strict=True)
    )
    answers = [
        m for m in run.graph.get_state(run.config).values["messages"] if isinstance(m, AIMessage)
    ]
    expected_out = sum(counter.count_message(m) for m in answers)
    assert run.usage() == {"main": totals(3, expected_in, expected_out, 0, 3)}


# --- background jobs ----------------------------------------------------------------------


def background_summary(messages: list[BaseMessage]) -> AIMessage:
    written = demo_summary(prompt_text(messages))
    return written.model_copy(update={"usage_metadata": REPORTED})


def stored_calls(run: Run) -> int:
    """Summary calls of the stored results not counted yet (an applied one is, until deleted)."""
    archive = ThreadArchive(run.store, run.thread)
    results = [r for _, r in JobResults(run.store, run.thread).results() if r]
    return sum(len(r.calls) for r in results if not was_applied(archive, r))


def test_an_applied_job_is_counted_once_with_the_usage_it_carried() -> None:
    run = Run(background_summary, main=answer_main, settings=BACKGROUND)
    n = run.until("started")
    assert wait_for_jobs(10) == 0
    [stored] = [r for _, r in JobResults(run.store, run.thread).results() if r]
    assert [c["input_tokens"] for c in stored.calls] == [900]
    assert "summary" not in run.usage()  # billed, but not counted before it applies
    n = run.until("applied", n)
    [applied] = run.named("applied")
    assert applied["model_calls"] == 1 and applied["input_tokens"] == 900
    assert run.usage()["summary"] == totals(1, 900, 40, 300, 0)
    for m in range(n, n + 12):  # replays of the applied result, later jobs: no double count
        run.turn(m)
        assert wait_for_jobs(10) == 0
    calls = run.summary.calls
    counted = run.usage()["summary"]["calls"]
    assert counted + stored_calls(run) == calls
    assert run.usage()["summary"] == totals(counted, 900 * counted, 40 * counted, 300 * counted, 0)


def test_a_superseded_job_is_counted_once_when_it_is_discarded() -> None:
    run = Run(background_summary, main=answer_main, settings=BACKGROUND)
    n = run.until("started")
    assert wait_for_jobs(10) == 0
    inline = Settings(
        trigger_messages=6, keep_messages=2, compaction_mode="inline", memory_extraction="off"
    )
    run.turn(n, Context(user_id="u", settings=inline))  # compacts inline: the job is stale
    assert run.usage()["summary"]["calls"] == 1  # the inline summary only
    n = run.until("discarded", n + 1)
    discarded = run.named("discarded")[0]
    assert discarded["reason"].startswith("superseded")
    assert discarded["model_calls"] == 1 and discarded["input_tokens"] == 900
    assert wait_for_jobs(10) == 0
    for m in range(n, n + 4):
        run.turn(m)
        assert wait_for_jobs(10) == 0
    counted = run.usage()["summary"]["calls"]
    assert counted >= 2
    assert counted + stored_calls(run) == run.summary.calls


def test_a_result_discarded_at_the_trigger_is_added_by_the_inline_compaction() -> None:
    store = InMemoryStore()
    run = Run(lambda messages: reported(EXACT), settings=INLINE, store=store)
    quiet = Settings(trigger_messages=100, memory_extraction="off", memory_mode="off")
    for n in range(3):
        run.turn(n, Context(user_id="u", settings=quiet))
    foreign: CallUsage = {
        "role": "summary",
        "input_tokens": 7777,
        "output_tokens": 77,
        "cached_tokens": 0,
        "source": "provider",
    }
    stale = JobResult(
        base_version=0,
        folded_ids=("gone-1", "gone-2"),
        folded_hash="0" * 64,
        sections={},
        token=1,
        holder="elsewhere",
        started_at="2026-01-01T00:00:00+00:00",
        stored_at="2026-01-01T00:00:01+00:00",
        latency_s=1.0,
        tokens_before=1,
        calls=(foreign,),
    )
    JobResults(store, run.thread).put(stale)
    trigger = Settings(
        trigger_messages=6,
        keep_messages=2,
        compaction_mode="background",
        background_fraction=0.99,
        background_wait_s=0,
        memory_extraction="off",
        memory_mode="off",
    )
    run.turn(3, Context(user_id="u", settings=trigger))
    [discarded] = run.named("discarded")
    assert discarded["reason"].startswith("history edited or rewound")
    assert discarded["input_tokens"] == 7777
    assert len(run.named("summarized")) == 1
    assert run.usage()["summary"] == totals(2, 7777 + 900, 77 + 40, 300, 0)
    assert JobResults(store, run.thread).results() == []
    run.turn(4, Context(user_id="u", settings=quiet))
    assert run.usage()["summary"]["calls"] == 2


# --- subagents ----------------------------------------------------------------------------


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found: {query}"


def test_a_child_s_calls_add_to_the_parent_s_subagent_totals() -> None:
    def parent(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return reported("all done", {"input_tokens": 11, "output_tokens": 1, "total_tokens": 0})
        call = {
            "name": "task",
            "args": {"description": "find the parcel", "subagent_type": "researcher"},
            "id": "t1",
            "type": "tool_call",
        }
        usage = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 0}
        return AIMessage(content="", tool_calls=[call], usage_metadata=usage)

    def child(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("the parcel is at dock 4")  # no usage reported: counted locally
        call = {"name": "lookup", "args": {"query": "P-1"}, "id": "l1", "type": "tool_call"}
        usage = {"input_tokens": 500, "output_tokens": 20, "total_tokens": 0}
        return AIMessage(content="", tool_calls=[call], usage_metadata=usage)

    child_model = ScriptedChatModel(responder=child)
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=ScriptedChatModel(responder=parent)),
        tools=[lookup],
        settings=Settings(memory_extraction="off", memory_mode="off"),
        parts=[
            SubagentsPart(
                [
                    SubagentSpec(
                        name="researcher",
                        description="Researches one question.",
                        system_prompt="You research one question.",
                        tools=(lookup,),
                        model=child_model,
                    )
                ]
            )
        ],
    )
    config: Any = {"configurable": {"thread_id": "sub"}}
    graph.invoke({"messages": [HumanMessage("where is P-1?")]}, config, context=CTX)
    _, second = child_model.requests
    counter = TokenCounter()
    local_in = counter.count_messages(second) + counter.count_tools(child_model.tool_requests[1])
    local_out = counter.count_message(AIMessage("the parcel is at dock 4"))
    usage = graph.get_state(config).values["model_usage"]
    assert usage["main"] == totals(2, 21, 3, 0, 0)
    assert usage["subagent"] == totals(2, 500 + local_in, 20 + local_out, 0, 1)


async def test_the_async_path_counts_summary_and_main_calls_too() -> None:
    run = Run(lambda messages: reported(EXACT))
    n = 0
    while not run.named("summarized"):
        text = f"Question {n}: order A-{1000 + n}. {PADDING}"
        async for chunk in run.graph.astream(
            {"messages": [HumanMessage(text, id=f"h{n}")]},
            run.config,
            context=CTX,
            stream_mode="custom",
        ):
            run.events.append(chunk)
        n += 1
        assert n < 20
    usage = (await run.graph.aget_state(run.config)).values["model_usage"]
    assert usage["summary"] == totals(1, 900, 40, 300, 0)
    assert usage["main"]["calls"] == run.main.calls == n
    assert usage["main"]["local_calls"] == n
