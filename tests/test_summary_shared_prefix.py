"""The shared-prefix summary request: the main request, its tools, then the marked instruction.

When the summary model is the main model, the summary call repeats the request the main
model gets for the state being compacted (messages and tool schemas) up to its last
folded message and adds the summary instruction as its last message; a separate summary
model, or ``summary_request="compact"``, gets the compact prompt.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.jobs import JobResults
from ctxgraph.nodes.compaction.node import CompactNode
from ctxgraph.nodes.compaction.plan import SUMMARY_REQUEST_ID, SUMMARY_REQUEST_ORIGIN
from ctxgraph.nodes.compaction.shared_prefix import cut, shown_kept
from ctxgraph.nodes.compaction.summarizer import SUMMARY_SYSTEM
from ctxgraph.nodes.model import ModelNode
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.messages import HIDE_FROM_UI_KEY, ORIGIN_KEY
from ctxgraph.state.scripted_model import ScriptedChatModel, bound_tool_names
from ctxgraph.state.settings import SettingsError
from ctxgraph.state.tokens import TokenCounter
from tests.support.requests import request_builder
from tests.support.scripted import is_summary_request, summary_text, tool_call

CTX = Context(user_id="u1")


def small(**changes: Any) -> Settings:
    """Small triggers, no memory: one compaction of ``window()`` folds its lookups."""
    return Settings(
        trigger_messages=8, keep_messages=2, memory_extraction="off", memory_mode="off", **changes
    )


SETTINGS = small()
REPORTED = {
    "input_tokens": 900,
    "output_tokens": 40,
    "total_tokens": 940,
    "input_token_details": {"cache_read": 700},
}
SUMMARY = summary_text(
    "Track the user's orders.",
    "The user asked where orders A-1 to A-4 are; each has shipped.",
)
CLAIMS_REFUND = summary_text(
    "Track the user's orders and refund A-4.",
    "Orders A-1 to A-4 have shipped. The assistant called the `refund_order` tool, which "
    "returned a confirmation.",
)


@tool
def lookup(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: shipped"


@tool
def refund_order(order_id: str) -> str:
    """Refund an order."""
    return f"refunded {order_id}"


def window(padding: str = "") -> list[BaseMessage]:
    """Five folded lookups; the kept tail is a refund, after the pinned user request."""
    messages: list[BaseMessage] = []
    for n in range(1, 5):
        messages += [
            HumanMessage(f"Where is order A-{n}? {padding}", id=f"h{n}"),
            tool_call("lookup", {"order_id": f"A-{n}"}, f"c{n}"),
            ToolMessage(f"order A-{n}: shipped", tool_call_id=f"c{n}", name="lookup", id=f"t{n}"),
            AIMessage(f"Order A-{n} has shipped. {padding}", id=f"a{n}"),
        ]
    return [
        *messages,
        HumanMessage("Please refund order A-4.", id="h5"),
        tool_call("lookup", {"order_id": "A-4"}, "c5"),
        ToolMessage("order A-4: shipped", tool_call_id="c5", name="lookup", id="t5"),
        tool_call("refund_order", {"order_id": "A-4"}, "r1"),
        ToolMessage("refunded A-4", tool_call_id="r1", name="refund_order", id="tr1"),
    ]


def replying(*summaries: str) -> Callable[[list[BaseMessage]], AIMessage]:
    """Summary calls get ``summaries`` in order (the last one repeated); others an answer."""
    left = list(summaries)

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if not is_summary_request(messages):
            return AIMessage("Refunded.")
        text = left.pop(0) if len(left) > 1 else left[0]
        return AIMessage(text, usage_metadata=REPORTED)  # type: ignore[arg-type]

    return reply


class Node:
    """A compact node and a model node over one request builder, and the state they see."""

    def __init__(
        self,
        main: ScriptedChatModel,
        *,
        summary: ScriptedChatModel | None = None,
        settings: Settings = SETTINGS,
        padding: str = "",
        prompt: str | None = None,
    ) -> None:
        counter = TokenCounter()
        tools = [lookup, refund_order]
        self.settings = settings
        self.builder = request_builder(tools, counter)
        models = Models(main=main, summary=summary)
        self.compact = CompactNode(models, self.builder, settings, counter, summary_prompt=prompt)
        self.model = ModelNode(main, tools, settings, self.builder)
        self.state: AgentState = {"messages": window(padding)}
        self.runtime = Runtime(context=CTX, store=InMemoryStore())
        self.config: RunnableConfig = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:6]}"}}

    def run(self, *, use_async: bool = False) -> dict[str, Any]:
        if use_async:
            return asyncio.run(self.compact.ainvoke(self.state, self.runtime, self.config))
        return self.compact.invoke(self.state, self.runtime, self.config)

    def main_call(self, model: ScriptedChatModel) -> tuple[list[BaseMessage], list[Any]]:
        """What the model node sends for the same state: its messages and tool schemas."""
        before = len(model.requests)
        self.model.invoke(self.state, self.runtime)
        assert len(model.requests) == before + 1
        return model.requests[-1], model.tool_requests[-1]


def summary_calls(model: ScriptedChatModel) -> list[tuple[list[BaseMessage], list[Any]]]:
    return [
        (request, tools)
        for request, tools in zip(model.requests, model.tool_requests, strict=True)
        if is_summary_request(request)
    ]


def shape(messages: list[BaseMessage]) -> list[tuple[str, Any, str | None]]:
    return [(type(m).__name__, m.content, m.id) for m in messages]


@pytest.mark.parametrize("use_async", [False, True])
def test_the_summary_request_is_the_main_request_up_to_the_fold_plus_the_instruction(
    use_async: bool,
) -> None:
    model = ScriptedChatModel(responder=replying(SUMMARY))
    node = Node(model)
    update = node.run(use_async=use_async)
    assert update["summary"]["summary"].startswith("The user asked where orders")
    [(request, tools)] = summary_calls(model)
    main_request, main_tools = node.main_call(model)

    # A strict prefix of the main request: it ends with the last folded message (the
    # A-4 lookup's result); the kept tail after it (the refund) is not sent.
    sent = len(request) - 1
    assert shape(request[:-1]) == shape(main_request[:sent])
    assert request[-2].id == "t5"
    assert [m.id for m in main_request[sent:]] == ["ai-r1", "tr1"]
    assert [m.additional_kwargs for m in request[:-1]] == [
        m.additional_kwargs for m in main_request[:sent]
    ]
    assert tools == main_tools and bound_tool_names(tools) == {"lookup", "refund_order"}
    instruction = request[-1]
    assert isinstance(instruction, HumanMessage)
    assert str(instruction.id).startswith(SUMMARY_REQUEST_ID)
    assert instruction.additional_kwargs == {
        ORIGIN_KEY: SUMMARY_REQUEST_ORIGIN,
        HIDE_FROM_UI_KEY: True,
    }
    text = str(instruction.content)
    # The fold is everything shown; the pinned request above the cut stays verbatim.
    assert "every message of the conversation above" in text
    assert 'the user message that begins "Please refund order A-4." stays verbatim' in text
    assert "<current_request>\nthe latest user message above\n</current_request>" in text
    assert "call no tool" in text
    for title in ("SESSION INTENT", "SUMMARY", "ARTIFACTS", "NEXT STEPS"):
        assert title in text
    # The folded messages are not repeated as a transcript.
    assert "Where is order A-1" not in text
    kept = [m.id for m in update["messages"][1:]]
    assert kept == ["h5", "ai-r1", "tr1"]


def test_a_separate_summary_model_gets_the_compact_request() -> None:
    main = ScriptedChatModel(responder=replying(SUMMARY))
    summary = ScriptedChatModel(responder=replying(SUMMARY))
    Node(main, summary=summary).run()
    assert main.requests == []
    [request] = summary.requests
    assert request[0].content == SUMMARY_SYSTEM and summary.tool_requests == [[]]
    assert "<folded_messages>" in str(request[-1].content)


def test_the_compact_setting_forces_the_compact_request() -> None:
    model = ScriptedChatModel(responder=replying(SUMMARY))
    chosen = small(
        summary_request="compact",
    )
    Node(model, settings=chosen).run()
    [(request, tools)] = summary_calls(model)
    assert request[0].content == SUMMARY_SYSTEM and tools == []


def test_the_shared_prefix_setting_also_serves_a_separate_summary_model() -> None:
    main = ScriptedChatModel(responder=replying(SUMMARY))
    summary = ScriptedChatModel(responder=replying(SUMMARY))
    chosen = small(
        summary_request="shared_prefix",
    )
    Node(main, summary=summary, settings=chosen).run()
    [request] = summary.requests
    assert request[-1].additional_kwargs[ORIGIN_KEY] == SUMMARY_REQUEST_ORIGIN


def test_a_tool_call_answer_gets_the_repair_request_on_the_same_prefix() -> None:
    calls = iter([tool_call("lookup", {"order_id": "A-9"}, "x1"), AIMessage(SUMMARY)])

    def reply(messages: list[BaseMessage]) -> AIMessage:
        return next(calls) if is_summary_request(messages) else AIMessage("Refunded.")

    model = ScriptedChatModel(responder=reply)
    update = Node(model).run()
    assert "summary" in update
    (first, tools), (repair, repair_tools) = summary_calls(model)
    assert shape(repair[: len(first)]) == shape(first) and repair_tools == tools
    assert len(repair) == len(first) + 2
    assert isinstance(repair[-2], AIMessage) and not repair[-2].tool_calls
    assert str(repair[-1].id).startswith(SUMMARY_REQUEST_ID)
    assert repair[-1].additional_kwargs[ORIGIN_KEY] == SUMMARY_REQUEST_ORIGIN
    assert "tool_call: the answer called lookup" in str(repair[-1].content)


def test_missing_sections_get_one_repair_then_the_degraded_record() -> None:
    model = ScriptedChatModel(responder=replying("no headings at all"))
    update = Node(model).run()
    assert len(summary_calls(model)) == 2  # one model: the prompt, then one repair request
    assert update["summary"].get("degraded") is True


@pytest.mark.parametrize("request_kind", ["shared_prefix", "compact"])
def test_a_success_in_the_kept_tail_is_not_shown_so_claiming_it_is_refused(
    request_kind: str,
) -> None:
    # Neither request shows the kept tail: the refund ran after the last folded message.
    model = ScriptedChatModel(responder=replying(CLAIMS_REFUND, SUMMARY))
    update = Node(model, settings=small(summary_request=request_kind)).run()
    _, repair = (request for request, _ in summary_calls(model))
    assert "invented_success" in str(repair[-1].content)
    assert update["summary"]["summary"].startswith("The user asked where orders A-1 to A-4")


def test_the_cut_keeps_pinned_messages_above_it_as_evidence() -> None:
    messages = window()
    by_id = {m.id: m for m in messages}
    kept = [by_id["h5"], by_id["ai-r1"], by_id["tr1"]]
    old = [m for m in messages if m not in kept]
    place = cut(messages, old, kept)
    assert not isinstance(place, str)
    assert place.end == messages.index(by_id["t5"]) + 1
    assert [m.id for m in place.pinned] == ["h5"]
    assert [m.id for m in shown_kept(messages, old, kept)] == ["h5"]
    assert cut(messages, [], kept) == "no folded message is in the main request"


def test_a_current_request_below_the_cut_is_quoted_in_the_instruction() -> None:
    model = ScriptedChatModel(responder=replying(SUMMARY))
    node = Node(model)
    node.state = {"messages": [*window()[:-2], HumanMessage("Now refund A-3.", id="h6")]}
    node.run()
    [(request, _)] = summary_calls(model)
    assert all(m.id != "h6" for m in request)
    assert "<current_request>\nNow refund A-3.\n</current_request>" in str(request[-1].content)


def test_a_fold_over_the_compact_input_budget_still_goes_as_one_shared_prefix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="ctxgraph.compaction")
    model = ScriptedChatModel(responder=replying(SUMMARY))
    chosen = small(
        trigger_tokens=20_000,
        summary_input_budget=1_000,
    )
    Node(model, settings=chosen, padding="The details of this turn matter. " * 40).run()
    requests = [request for request, _ in summary_calls(model)]
    assert len(requests) == 1  # the compact request would have needed chunks
    assert requests[0][-1].additional_kwargs.get(ORIGIN_KEY) == "summary_request"
    [line] = [r.getMessage() for r in caplog.records if "compaction.summarized" in r.getMessage()]
    assert "request=shared_prefix" in line
    assert "shared_prefix_unfit" not in line


def test_a_background_job_sends_the_shared_prefix_of_its_snapshot() -> None:
    model = ScriptedChatModel(responder=replying(SUMMARY))
    node = Node(model, settings=small(compaction_mode="background"))
    store = node.runtime.store
    assert store is not None
    launch = node.compact.run_job(node.state, store, "bg", wait_s=30)
    assert launch.state == "completed"
    [(request, tools)] = summary_calls(model)
    main_request, main_tools = node.main_call(model)
    assert shape(request[:-1]) == shape(main_request[: len(request) - 1])
    assert tools == main_tools and request[-2].id == "t5"
    assert request[-1].additional_kwargs[ORIGIN_KEY] == SUMMARY_REQUEST_ORIGIN
    result = JobResults(store, "bg").ready(0)
    assert result is not None and result.request == "shared_prefix"
    assert result.calls[0]["cached_tokens"] == 700


def test_cached_tokens_reach_the_summarized_event_and_model_usage() -> None:
    model = ScriptedChatModel(responder=replying(SUMMARY))
    graph = build_graph(
        models=Models(main=model),
        tools=[lookup, refund_order],
        settings=SETTINGS,
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    config: RunnableConfig = {"configurable": {"thread_id": "cached"}}
    events: list[dict[str, Any]] = []
    for n in range(1, 8):
        for chunk in graph.stream(
            {"messages": [HumanMessage(f"Question {n}.", id=f"q{n}")]},
            config,
            context=CTX,
            stream_mode="custom",
        ):
            events.append(chunk)
        if any(e["event"] == "compaction.summarized" for e in events):
            break
    [event] = [e for e in events if e["event"] == "compaction.summarized"]
    assert event["request"] == "shared_prefix" and event["outcome"] == "written"
    assert (event["input_tokens"], event["cached_tokens"]) == (900, 700)
    usage = graph.get_state(config).values["model_usage"]["summary"]
    assert usage["cached_tokens"] == 700 and usage["calls"] == 1


def test_an_unknown_summary_request_names_the_setting() -> None:
    with pytest.raises(SettingsError, match=r"Settings\.summary_request must be 'auto'"):
        Settings(summary_request="cached")  # type: ignore[arg-type]
    env = Settings.from_env({"CTXGRAPH_SUMMARY_REQUEST": "compact"})
    assert env.summary_request == "compact"


def test_a_background_result_is_checked_with_what_its_request_showed() -> None:
    # The job's request is cut before the refund: the claim is refused and repaired, and
    # the repaired result passes the check again when the trigger applies it.
    model = ScriptedChatModel(responder=replying(CLAIMS_REFUND, SUMMARY))
    node = Node(model, settings=small(compaction_mode="background"))
    store = node.runtime.store
    assert store is not None
    thread_id = node.config["configurable"]["thread_id"]
    assert node.compact.run_job(node.state, store, thread_id, wait_s=30).state == "completed"
    assert len(summary_calls(model)) == 2
    update = node.run()  # at the trigger: the stored result is applied, not written again
    assert update["summary"]["summary"].startswith("The user asked where orders A-1 to A-4")
    assert len(summary_calls(model)) == 2


def test_a_custom_summary_prompt_is_the_instruction_of_the_shared_prefix() -> None:
    model = ScriptedChatModel(responder=replying(SUMMARY))
    prompt = "CUSTOM HANDOFF of {folded}. Record so far: {previous_summary}. Max {max_tokens}."
    Node(model, prompt=prompt).run()
    [(request, _)] = summary_calls(model)
    text = str(request[-1].content)
    assert (
        "CUSTOM HANDOFF of every message of the conversation above" in text
        and "Record so far: (none yet)." in text
    )
    assert "call no tool" in text and "<folded_messages>" not in text


def test_a_request_over_the_input_window_falls_back_to_the_compact_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="ctxgraph.compaction")
    model = ScriptedChatModel(responder=replying(SUMMARY))
    padding = "The details of this turn matter. " * 40
    Node(model, settings=small(context_window=1_500), padding=padding).run()
    [(request, _)] = summary_calls(model)
    assert request[0].content == SUMMARY_SYSTEM
    [line] = [r.getMessage() for r in caplog.records if "compaction.summarized" in r.getMessage()]
    assert "over the summary model's input window of 1500" in line


def test_unreported_usage_counts_the_shared_request_with_its_tool_schemas() -> None:
    def reply(messages: list[BaseMessage]) -> AIMessage:
        return AIMessage(SUMMARY if is_summary_request(messages) else "Refunded.")

    model = ScriptedChatModel(responder=reply)
    node = Node(model)
    update = node.run()
    [(request, _)] = summary_calls(model)
    counter = TokenCounter()
    schemas = node.builder.bound_tool_tokens(node.state, node.settings)
    assert schemas > 0
    expected = sum(counter.count_message(m) for m in request) + counter.count_messages([])
    usage = update["model_usage"]["summary"]
    assert usage["local_calls"] == 1 and usage["input_tokens"] == expected + schemas
