"""Compaction through the whole graph: triggers, summaries, fallbacks, archive and ledger."""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import Graph, build_graph
from ctxgraph.nodes.compaction.ledger import find_contradictions
from ctxgraph.nodes.compaction.node import CompactionError
from ctxgraph.nodes.compaction.render import render_sections, render_summary
from ctxgraph.nodes.compaction.summarizer import SUMMARY_TAGS, parse_sections, transcript
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_summary
from ctxgraph.state.messages import message_origin
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.settings import DEFAULT_SYSTEM_PROMPT
from ctxgraph.state.summary import CHAIN_SEED, checksum
from ctxgraph.state.tokens import TokenCounter, count_text
from ctxgraph.store.persistence.archive import (
    ArchiveRecord,
    ThreadArchive,
    VerifyReport,
    averify_thread,
    build_record,
    record_messages,
    verify_thread,
)
from ctxgraph.store.persistence.connection import Persistence
from tests.support.scripted import (
    Dispatch,
    block,
    demo_summarizer,
    is_summary_request,
    main_requests,
    prompt_text,
    summary_requests,
    summary_text,
    tool_call,
)

CTX = Context(user_id="u1")
# These tests are about compaction; memory extraction (which adds model calls) is off.
NO_MEMORY = "off"
SMALL = Settings(trigger_messages=12, keep_messages=2, memory_extraction=NO_MEMORY)
NO_FALLBACK = replace(SMALL, summary_fallback="off")
"""``SMALL`` without the model-free record: a compaction no model summarizes is skipped."""
"""Compacts once the request holds 12 messages, keeping the last tool exchange verbatim."""

FILLER = (
    "The warehouse scanned the parcel at the dock and the carrier confirmed the pickup window. " * 4
).strip()
ORDERS = ["A-1001", "B-2002", "C-3003", "D-4004", "E-5005", "F-6006", "G-7007", "H-8008"]
SECTION_HEADINGS = ("SESSION INTENT", "SUMMARY", "ARTIFACTS", "NEXT STEPS")


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order's shipping status."""
    return f"order {order_id}: shipped from the Leeds depot. {FILLER} {FILLER}"


@tool
def charge_card(order_id: str, amount: str) -> str:
    """Charge the customer's card for an order."""
    raise TimeoutError(f"payment gateway timed out while charging {order_id}")


def question(n: int) -> HumanMessage:
    """The user's message of turn ``n`` in the order session."""
    return HumanMessage(f"Where is order {ORDERS[n - 1]}?", id=f"h{n}")


def answer_text(n: int) -> str:
    return f"Order {ORDERS[n - 1]} is on its way."


def latest_user(request: list[BaseMessage]) -> HumanMessage:
    users = [
        m for m in request if isinstance(m, HumanMessage) and message_origin(m) is None and m.id
    ]
    assert users, "the request holds no user message"
    return users[-1]


def order_agent(
    calls: dict[int, tuple[str, dict[str, Any]]] | None = None,
) -> Callable[[list[BaseMessage]], AIMessage]:
    """Main model of the order session: turn n calls one tool (lookup by default), then answers."""
    plan = calls or {}

    def reply(request: list[BaseMessage]) -> AIMessage:
        assert not is_summary_request(request)
        n = int(str(latest_user(request).id)[1:])
        if isinstance(request[-1], ToolMessage):
            return AIMessage(answer_text(n), id=f"r{n}")
        name, args = plan.get(n, ("lookup_order", {"order_id": ORDERS[n - 1]}))
        return tool_call(name, args, f"c{n}", id=f"a{n}")

    return reply


def describe(messages: list[BaseMessage]) -> list[tuple[str, str]]:
    """(type, id) of each message; tool results by their call id (their own ids are random)."""
    return [(m.type, m.tool_call_id if isinstance(m, ToolMessage) else str(m.id)) for m in messages]


def turn_messages(n: int) -> list[tuple[str, str]]:
    return [("human", f"h{n}"), ("ai", f"a{n}"), ("tool", f"c{n}"), ("ai", f"r{n}")]


def transcript_of(n: int) -> str:
    """The summary prompt's transcript of lookup turn ``n``."""
    order = ORDERS[n - 1]
    return "\n".join(
        [
            f"human: Where is order {order}?",
            f'assistant called lookup_order({{"order_id": "{order}"}}) [c{n}]',
            f"tool result [c{n}] (success): order {order}: shipped from the Leeds depot. "
            f"{FILLER} {FILLER}",
            f"assistant: {answer_text(n)}",
        ]
    )


def lookup_entry(n: int) -> dict[str, Any]:
    return {
        "id": f"c{n}",
        "name": "lookup_order",
        "args": {"order_id": ORDERS[n - 1]},
        "status": "succeeded",
        "error": None,
        "idempotency_key": None,
        "side_effect": False,
        "turn": n,
    }


SUMMARY_V1 = summary_text(
    "Track the user's orders.",
    "Orders A-1001 and B-2002 were looked up; both shipped from Leeds.",
    "A-1001, B-2002",
    "Look up C-3003.",
)
SUMMARY_V2 = summary_text(
    "Track the user's orders.",
    "Orders A-1001 to D-4004 were looked up; all shipped from Leeds.",
    "A-1001, B-2002, C-3003, D-4004",
    "Look up E-5005.",
)
MAIN_SUMMARY = summary_text(
    "Track the user's orders (written by the main model).",
    "The main model folded the lookups of A-1001 and B-2002.",
    "A-1001, B-2002",
    "Look up C-3003.",
)


def sections_of(text: str) -> dict[str, str]:
    return parse_sections(text)


@dataclass
class Session:
    """A graph on the order tools with scripted models and an in-memory checkpointer/store."""

    graph: Graph
    main: ScriptedChatModel
    summarizer: ScriptedChatModel | None
    store: BaseStore | None
    thread: str = "t1"
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread}}

    def turn(self, n: int) -> dict[str, Any]:
        result = self.graph.invoke({"messages": [question(n)]}, self.config, context=CTX)
        self.results.append(result)
        return result

    def turns(self, *numbers: int) -> None:
        for n in numbers:
            self.turn(n)

    def state(self) -> dict[str, Any]:
        return dict(self.graph.get_state(self.config).values)

    def records(self) -> list[ArchiveRecord]:
        assert self.store is not None
        return ThreadArchive(self.store, self.thread).records()

    def verify(self) -> VerifyReport:
        assert self.store is not None
        return verify_thread(self.store, self.thread, self.state().get("compaction"))


def make_session(
    *,
    main: ScriptedChatModel | None = None,
    summarizer: ScriptedChatModel | None = None,
    settings: Settings = SMALL,
    tools: tuple[BaseTool, ...] = (lookup_order,),
    store: BaseStore | None = None,
    with_store: bool = True,
) -> Session:
    main = main or ScriptedChatModel(responder=order_agent())
    if with_store and store is None:
        store = InMemoryStore()
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=store,
        models=Models(main=main, summary=summarizer),
        tools=tools,
        settings=settings,
    )
    return Session(graph=graph, main=main, summarizer=summarizer, store=store)


def assert_untouched(session: Session, turns: int) -> None:
    """No compaction was committed: every message of ``turns`` turns is still in state."""
    state = session.state()
    assert describe(state["messages"]) == [m for n in range(1, turns + 1) for m in turn_messages(n)]
    assert state.get("summary") is None
    assert state.get("compaction") is None
    assert session.records() == []


# --- 1. below the trigger -------------------------------------------------------------------


def test_no_summary_call_below_the_trigger() -> None:
    summarizer = demo_summarizer()
    session = make_session(summarizer=summarizer)
    session.turns(1, 2)

    assert summarizer.calls == 0
    assert session.main.calls == 4
    assert summary_requests(session.main) == []
    state = session.state()
    assert "summary" not in state
    assert "compaction" not in state
    assert describe(state["messages"]) == turn_messages(1) + turn_messages(2)
    assert session.records() == []
    last = session.main.requests[-1]
    assert not any(message_origin(m) == "summary" for m in last)
    assert describe(last[1:]) == turn_messages(1) + turn_messages(2)[:3]


# --- 2. a compaction on the message trigger -------------------------------------------------


def test_message_trigger_folds_whole_exchanges_and_injects_the_summary() -> None:
    agent = order_agent()
    parallel = AIMessage(
        content="",
        id="a3",
        tool_calls=[
            {"name": "lookup_order", "args": {"order_id": "C-3003"}, "id": "c3"},
            {"name": "lookup_order", "args": {"order_id": "H-8008"}, "id": "c3b"},
        ],
    )

    def reply(request: list[BaseMessage]) -> AIMessage:
        # Turn 3 looks up two orders at once: keeping the last 2 messages would split them.
        if latest_user(request).id == "h3" and isinstance(request[-1], HumanMessage):
            return parallel
        return agent(request)

    summarizer = ScriptedChatModel(script=[SUMMARY_V1])
    session = make_session(main=ScriptedChatModel(responder=reply), summarizer=summarizer)
    session.turns(1, 2)
    before = session.state()["messages"]
    assert summarizer.calls == 0
    session.turn(3)

    # The summary model got exactly the folded messages and the current request.
    assert summarizer.calls == 1
    prompt = prompt_text(summarizer.requests[0])
    assert block(prompt, "previous_summary") == "(none yet)"
    assert block(prompt, "folded_messages") == transcript_of(1) + "\n" + transcript_of(2)
    assert block(prompt, "current_request") == "Where is order C-3003?"
    assert "Stay under 1500 tokens." in prompt

    # The window keeps the latest user message (pinned) and its whole tool exchange.
    state = session.state()
    kept = [("human", "h3"), ("ai", "a3"), ("tool", "c3"), ("tool", "c3b")]
    assert describe(state["messages"]) == [*kept, ("ai", "r3")]
    ledger = {
        "tool_calls": [lookup_entry(1), lookup_entry(2)],
        "aggregated": {},
        "folded_calls": {},
        "constraints": [],
        "folded_constraints": 0,
        # Both orders were only looked up: indexed (the archive finds them), not listed.
        "identifiers": [],
        "looked_up": ["A-1001", "B-2002"],
        "user_turns": 2,
    }
    assert state["summary"] == {"schema_version": 1, **sections_of(SUMMARY_V1), "ledger": ledger}

    # Archive v1 holds exactly the folded messages, in order, and matches the mark.
    records = session.records()
    assert len(records) == 1
    record = records[0]
    folded = record_messages(record)
    assert describe(folded) == turn_messages(1) + turn_messages(2)
    assert [m.content for m in folded] == [m.content for m in before]
    assert record["event_ids"] == [m.id for m in before]
    assert record["previous_chain_hash"] == CHAIN_SEED
    mark = state["compaction"]
    assert mark == {
        "version": 1,
        "cursor": 8,
        "checksum": checksum(state["summary"], 8, [str(m.id) for m in before]),
        "chain_hash": record["chain_hash"],
    }
    assert session.verify() == VerifyReport(True, 1, None, None)

    # The next main-model request is [system, summary, *kept].
    request = main_requests(session.main)[-1]
    assert isinstance(request[0], SystemMessage)
    assert request[0].content == DEFAULT_SYSTEM_PROMPT
    injected = request[1]
    assert isinstance(injected, HumanMessage)
    assert injected.additional_kwargs == {"origin": "summary", "hide_from_ui": True}
    assert injected.content == render_summary(state["summary"], 1, SMALL.ledger_budget)
    lines = str(injected.content).splitlines()
    for heading in SECTION_HEADINGS:
        assert heading in lines
    assert "Orders A-1001 and B-2002 were looked up; both shipped from Leeds." in lines
    assert "TOOL CALLS (recorded by code, authoritative):" in lines
    # Read-only successes of one tool share a line; B-2002 is on it, so it is not repeated.
    assert "- [succeeded] lookup_order ×2 (read-only), turns 1–2, latest: order_id=B-2002" in lines
    assert "IDENTIFIERS: A-1001" in lines
    assert describe(request[2:]) == kept
    assert len(request) == 6
    assert session.results[-1]["messages"][-1].content == answer_text(3)


# --- 3. fallback to the main model ----------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [RuntimeError("summary service unavailable"), AIMessage(content="")],
    ids=["raises", "empty"],
)
def test_main_model_writes_the_summary_when_the_summary_model_fails(
    failure: BaseException | AIMessage, caplog: pytest.LogCaptureFixture
) -> None:
    summarizer = ScriptedChatModel(script=[failure])
    main = ScriptedChatModel(responder=Dispatch(order_agent(), summary=[MAIN_SUMMARY]))
    session = make_session(main=main, summarizer=summarizer)
    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        session.turns(1, 2, 3)

    assert summarizer.calls == 1
    asked = summary_requests(main)
    assert len(asked) == 1
    assert asked[0] == summarizer.requests[0]  # the same prompt, second in line
    state = session.state()
    assert {k: state["summary"][k] for k in sections_of(MAIN_SUMMARY)} == sections_of(MAIN_SUMMARY)
    assert state["compaction"]["version"] == 1
    assert describe(state["messages"]) == turn_messages(3)
    assert session.verify().ok
    reason = "empty summary" if isinstance(failure, AIMessage) else "summary service unavailable"
    assert any(reason in r.getMessage() for r in caplog.records)
    assert not any("compaction skipped" in r.getMessage() for r in caplog.records)


# --- 4. both models fail --------------------------------------------------------------------


def refuse(_prompt: str) -> AIMessage:
    raise RuntimeError("main model overloaded")


def test_both_models_failing_leaves_state_untouched_and_the_run_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    summarizer = ScriptedChatModel(script=[RuntimeError("summary service unavailable")])
    main = ScriptedChatModel(responder=Dispatch(order_agent(), summary=refuse))
    # With the model-free fallback off, a compaction no model can summarize is skipped.
    session = make_session(main=main, summarizer=summarizer, settings=NO_FALLBACK)
    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        session.turns(1, 2, 3)

    assert summarizer.calls == 1
    assert len(summary_requests(main)) == 1
    assert_untouched(session, 3)
    assert session.results[-1]["messages"][-1].content == answer_text(3)
    # The final call got the whole window, no summary.
    assert describe(main_requests(main)[-1][1:]) == [
        *turn_messages(1),
        *turn_messages(2),
        *turn_messages(3)[:3],
    ]
    skipped = [
        r
        for r in caplog.records
        if r.name == "ctxgraph.compaction" and "compaction skipped" in r.getMessage()
    ]
    assert len(skipped) == 1
    assert skipped[0].levelno == logging.WARNING
    text = skipped[0].getMessage()
    assert text.startswith("compaction skipped, state left as it was: no usable summary")
    assert "RuntimeError: summary service unavailable" in text
    assert "RuntimeError: main model overloaded" in text


# --- 5. failing and not fitting -------------------------------------------------------------

REPORT_WORDS = ("quarterly", "revenue", "grew", "in", "the", "north", "while", "costs", "held")


@tool
def fetch_report(name: str) -> str:
    """Fetch a long report by name."""
    words = [REPORT_WORDS[i % len(REPORT_WORDS)] for i in range(1500)]
    return f"report {name}: " + " ".join(words)


@pytest.mark.parametrize("earlier_turns", [2, 0], ids=["models-fail", "nothing-to-fold"])
def test_failed_compaction_over_the_window_raises_naming_the_largest_message(
    earlier_turns: int,
) -> None:
    plan = {earlier_turns + 1: ("fetch_report", {"name": "q3"})}
    summarizer = ScriptedChatModel(script=[RuntimeError("summary service unavailable")])
    main = ScriptedChatModel(responder=Dispatch(order_agent(plan), summary=refuse))
    settings = Settings(
        memory_extraction=NO_MEMORY,
        context_window=1_600,
        trigger_tokens=1_400,
        summary_max_tokens=300,
        ledger_max_tokens=300,
        keep_messages=2,
        offload_tokens=0,  # the report stays in the window (it would be offloaded otherwise)
    )
    session = make_session(
        main=main, summarizer=summarizer, settings=settings, tools=(lookup_order, fetch_report)
    )
    session.turns(*range(1, earlier_turns + 1))
    calls_before = len(main_requests(main))

    with pytest.raises(CompactionError) as raised:
        session.turn(earlier_turns + 1)
    # The kept report alone fires the token trigger, so no summary could make the request
    # fit: none is asked for.
    assert summarizer.calls == 0
    assert summary_requests(main) == []

    state = session.state()
    report = state["messages"][-1]
    assert isinstance(report, ToolMessage)
    assert report.name == "fetch_report"
    assert str(report.content).startswith("report q3: quarterly revenue")
    message = str(raised.value)
    assert re.search(
        r"the request is \d+ tokens, over the main model's input window of 1600", message
    )
    if earlier_turns:
        assert "the compacted request would not fit, so no summary was asked for" in message
    size = TokenCounter().count_message(report)
    assert message.endswith(
        f"the largest message is a tool message (fetch_report, id {report.id}) of {size} tokens"
    )
    # The oversized request never reached the main model, and nothing was lost.
    assert len(main_requests(main)) == calls_before + 1
    expected = [m for n in range(1, earlier_turns + 1) for m in turn_messages(n)]
    n = earlier_turns + 1
    assert describe(state["messages"]) == [
        *expected,
        ("human", f"h{n}"),
        ("ai", f"a{n}"),
        ("tool", f"c{n}"),
    ]
    assert state.get("summary") is None
    assert session.records() == []


# --- 6. a second compaction -----------------------------------------------------------------


def test_second_compaction_builds_on_the_first_summary() -> None:
    summarizer = ScriptedChatModel(script=[SUMMARY_V1, SUMMARY_V2])
    session = make_session(summarizer=summarizer)
    session.turns(1, 2, 3, 4)
    assert summarizer.calls == 1
    session.turn(5)

    assert summarizer.calls == 2
    first = session.state()  # after turn 5
    second_prompt = prompt_text(summarizer.requests[1])
    assert block(second_prompt, "previous_summary") == render_sections(sections_of(SUMMARY_V1))
    assert block(second_prompt, "folded_messages") == transcript_of(3) + "\n" + transcript_of(4)
    assert block(second_prompt, "current_request") == "Where is order E-5005?"

    records = session.records()
    assert [r["version"] for r in records] == [1, 2]
    assert describe(record_messages(records[1])) == turn_messages(3) + turn_messages(4)
    assert records[1]["previous_chain_hash"] == records[0]["chain_hash"]
    assert [r["cursor"] for r in records] == [8, 16]
    mark = first["compaction"]
    assert mark["version"] == 2
    assert mark["cursor"] == records[0]["cursor"] + len(records[1]["messages"]) == 16
    assert mark["chain_hash"] == records[1]["chain_hash"]
    assert session.verify() == VerifyReport(True, 2, None, None)
    assert describe(first["messages"]) == turn_messages(5)
    assert first["summary"]["ledger"]["tool_calls"] == [lookup_entry(n) for n in range(1, 5)]
    assert first["summary"]["summary"] == sections_of(SUMMARY_V2)["summary"]
    request = main_requests(session.main)[-1]
    assert request[1].content == render_summary(first["summary"], 2, SMALL.ledger_budget)
    assert '<conversation_summary version="2">' in str(request[1].content)


# --- 7. injection never grows state ---------------------------------------------------------


def test_injected_summary_is_never_stored_and_the_window_stays_bounded() -> None:
    session = make_session(summarizer=demo_summarizer())
    lengths: list[int] = []
    for n in range(1, len(ORDERS) + 1):
        session.turn(n)
        state = session.state()
        lengths.append(len(state["messages"]))
        assert not any(message_origin(m) == "summary" for m in state["messages"])
        assert all(isinstance(m, (HumanMessage, AIMessage, ToolMessage)) for m in state["messages"])

    assert session.state()["compaction"]["version"] == 3
    assert lengths == [4, 8, 4, 8, 4, 8, 4, 8]
    # Once a summary exists, every main request carries it exactly once, right after the system.
    with_summary = [r for r in main_requests(session.main) if len(r) > 1 and message_origin(r[1])]
    assert len(with_summary) == 1 + 2 * (len(ORDERS) - 3)  # from the compacting turn on
    for request in main_requests(session.main):
        origins = [message_origin(m) for m in request]
        assert origins.count("summary") <= 1
        assert "summary" not in origins[2:]
        assert len(request) <= 11
    assert session.verify() == VerifyReport(True, 3, None, None)


# --- 8. streaming ---------------------------------------------------------------------------

STREAM_SUMMARY = summary_text(
    "Zebra quokka intent.",
    "Marmalade flamingo summary.",
    "Platypus artifacts.",
    "Narwhal steps.",
)


def test_summary_tokens_never_reach_the_message_stream() -> None:
    summarizer = ScriptedChatModel(script=[STREAM_SUMMARY])
    main = ScriptedChatModel(responder=order_agent())
    session = make_session(main=main, summarizer=summarizer)
    session.turns(1, 2)
    final = "Order C-3003 left the depot this morning."
    main.responder = lambda request: (
        AIMessage(final, id="r3")
        if isinstance(request[-1], ToolMessage)
        else order_agent()(request)
    )

    chunks = list(
        session.graph.stream(
            {"messages": [question(3)]}, session.config, context=CTX, stream_mode="messages"
        )
    )
    assert summarizer.calls == 1
    assert session.state()["compaction"]["version"] == 1

    summary_words = {
        word for word in re.findall(r"[A-Za-z]{5,}", STREAM_SUMMARY) if word not in final
    }
    for chunk, metadata in chunks:
        text = chunk.text
        assert not any(word in text for word in summary_words), text
        assert not set(SUMMARY_TAGS) & set(metadata.get("tags") or [])
        if metadata["langgraph_node"] == "compact":
            assert not isinstance(chunk, AIMessageChunk)
            assert text == ""
    answer = [
        chunk.text
        for chunk, metadata in chunks
        if isinstance(chunk, AIMessageChunk)
        and metadata["langgraph_node"] == "model"
        and chunk.id == "r3"
        and chunk.text
    ]
    assert len(answer) == len(final.split())
    assert "".join(answer) == final


# --- 9. contradictions with the ledger ------------------------------------------------------

CHARGE_PLAN = {1: ("charge_card", {"order_id": "A-1001", "amount": "30.00"})}
CLAIMS_SUCCESS = summary_text(
    "Charge A-1001 and track B-2002.",
    "The charge_card call (c1) succeeded. Order B-2002 was looked up.",
)
CONSISTENT = summary_text(
    "Charge A-1001 and track B-2002.",
    "The charge for A-1001 (c1) timed out, so its outcome is unknown. Order B-2002 was looked up.",
)


def charge_session(
    main_summary: str, settings: Settings = SMALL
) -> tuple[Session, ScriptedChatModel]:
    summarizer = ScriptedChatModel(script=[CLAIMS_SUCCESS])
    main = ScriptedChatModel(responder=Dispatch(order_agent(CHARGE_PLAN), summary=[main_summary]))
    session = make_session(
        main=main, summarizer=summarizer, tools=(lookup_order, charge_card), settings=settings
    )
    return session, summarizer


def test_summary_contradicting_the_ledger_is_replaced_by_a_consistent_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session, summarizer = charge_session(CONSISTENT)
    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        session.turns(1, 2, 3)

    # The contradicting answer gets one repair request quoting the contradiction.
    assert summarizer.calls == 2
    assert "ledger records it as unknown" in str(summarizer.requests[1][-1].content)
    assert len(summary_requests(session.main)) == 1
    state = session.state()
    assert state["summary"]["summary"] == sections_of(CONSISTENT)["summary"]
    charge = state["summary"]["ledger"]["tool_calls"][0]
    assert charge["id"] == "c1"
    assert charge["status"] == "unknown"
    assert charge["side_effect"] is True
    assert "timed out" in str(charge["error"])
    assert find_contradictions(render_sections(state["summary"]), state["summary"]["ledger"]) == []
    assert session.verify().ok
    rejected = [
        r.getMessage() for r in caplog.records if "ledger records it as unknown" in r.getMessage()
    ]
    assert len(rejected) == 1
    assert "charge_card (call c1) succeeded" in rejected[0]


def test_when_both_summaries_contradict_the_ledger_nothing_is_committed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    also_wrong = summary_text("Charge A-1001.", "Payment c1 went through. B-2002 was looked up.")
    # With the model-free fallback off, a compaction no model can summarize is skipped.
    session, summarizer = charge_session(also_wrong, NO_FALLBACK)
    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        session.turns(1, 2, 3)

    # Each model gets its answer refused, then one repair request (which fails too).
    assert summarizer.calls == 2
    assert len(summary_requests(session.main)) == 2
    assert_untouched(session, 3)
    skipped = [r.getMessage() for r in caplog.records if "compaction skipped" in r.getMessage()]
    assert len(skipped) == 1
    assert skipped[0].count("ledger records it as unknown") == 2


# --- 10. the ledger through twenty compactions ----------------------------------------------

CONSTRAINT = "Never refund more than $50.00 per order."


def order_id(n: int) -> str:
    return f"ORD-2026-{n:04d}"


@tool
def get_order(order_id: str) -> str:
    """Read an order."""
    return f"Order {order_id}: paid and packed at the Leeds depot. {FILLER} {FILLER}"


@tool
def refund_order(order_id: str, amount: str, idempotency_key: str) -> str:
    """Refund part of an order."""
    number = int(order_id.rsplit("-", 1)[1])
    return f"Refund of {amount} for {order_id} recorded as REF-{number:05d}. {FILLER} {FILLER}"


@tool
def charge_order(order_id: str, amount: str) -> str:
    """Charge an order's card."""
    raise RuntimeError(f"card declined by issuer for {order_id}")


@tool
def ship_order(order_id: str) -> str:
    """Hand an order to the carrier."""
    raise TimeoutError(f"carrier API timed out for {order_id}")


LEDGER_TOOLS = (get_order, refund_order, charge_order, ship_order)


def ledger_call(n: int) -> tuple[str, dict[str, Any]]:
    """Turn n's tool call: reads, refunds, declined charges and timed-out shipments in turn."""
    kind = n % 4
    if kind == 1:
        return "get_order", {"order_id": order_id(n)}
    if kind == 2:
        return "refund_order", {
            "order_id": order_id(n),
            "amount": "$12.50",
            "idempotency_key": f"rf-{n}",
        }
    if kind == 3:
        return "charge_order", {"order_id": order_id(n), "amount": "$20.00"}
    return "ship_order", {"order_id": order_id(n)}


def ledger_agent(request: list[BaseMessage]) -> AIMessage:
    n = int(str(latest_user(request).id)[1:])
    if isinstance(request[-1], ToolMessage):
        return AIMessage(f"I noted the tool result for {order_id(n)}.", id=f"r{n}")
    name, args = ledger_call(n)
    return tool_call(name, args, f"c{n}", id=f"a{n}")


def ledger_question(n: int) -> HumanMessage:
    text = f"Please handle order {order_id(n)} next."
    if n == 2:
        text += " " + CONSTRAINT
    return HumanMessage(text, id=f"h{n}")


def test_ledger_survives_twenty_compactions_end_to_end() -> None:
    settings = Settings(
        trigger_messages=10,
        keep_messages=2,
        ledger_max_tool_calls=10,
        memory_extraction=NO_MEMORY,
    )
    main = ScriptedChatModel(responder=ledger_agent)
    summarizer = demo_summarizer()
    session = make_session(main=main, summarizer=summarizer, settings=settings, tools=LEDGER_TOOLS)
    n = 0
    while (session.state().get("compaction") or {}).get("version", 0) < 20:
        n += 1
        assert n <= 60, "twenty compactions should take well under 60 turns"
        session.graph.invoke({"messages": [ledger_question(n)]}, session.config, context=CTX)

    state = session.state()
    assert state["compaction"]["version"] == 20
    assert summarizer.calls == 20  # every compaction succeeded with the summary model
    assert summary_requests(main) == []
    assert session.verify() == VerifyReport(True, 20, None, None)

    folded = [m for record in session.records() for m in record_messages(record)]
    folded_calls = [c for m in folded if isinstance(m, AIMessage) for c in m.tool_calls]
    assert len(folded_calls) >= 20
    ledger = state["summary"]["ledger"]
    entries = {entry["id"]: entry for entry in ledger["tool_calls"]}
    assert len(entries) == settings.ledger_max_tool_calls
    counted: dict[str, dict[str, int]] = {}
    reads = 0
    for call in folded_calls:
        number = int(call["id"][1:])
        if call["name"] == "get_order":
            reads += 1
            continue
        entry = entries.get(call["id"])
        if entry is None:  # beyond the bound: counted per tool and status
            status = {"refund_order": "succeeded", "charge_order": "failed"}.get(
                call["name"], "unknown"
            )
            by_status = counted.setdefault(call["name"], {})
            by_status[status] = by_status.get(status, 0) + 1
            continue
        assert entry["name"] == call["name"]
        assert entry["args"] == call["args"]
        assert entry["side_effect"] is True
        if call["name"] == "refund_order":
            assert entry["status"] == "succeeded"
            assert entry["idempotency_key"] == f"rf-{number}"
            assert f"REF-{number:05d}" in ledger["identifiers"]
        elif call["name"] == "charge_order":
            assert entry["status"] == "failed"
            assert entry["error"] == (
                f"Error: RuntimeError('card declined by issuer for {order_id(number)}')"
            )
        else:
            assert entry["status"] == "unknown"
            assert "timed out" in str(entry["error"])
        assert order_id(number) in ledger["identifiers"]
    # Beyond the bound, calls are folded into counts, never lost: read-only successes
    # first, then side-effect successes; the newest side effects that did not succeed stay.
    assert ledger["aggregated"].get("get_order", 0) == reads > 0
    assert counted == ledger["folded_calls"]
    assert counted["refund_order"]["succeeded"] > 0
    assert all(e["side_effect"] and e["status"] != "succeeded" for e in ledger["tool_calls"])
    assert [c["text"] for c in ledger["constraints"]] == [CONSTRAINT]
    assert "$50.00" in ledger["identifiers"]
    # The main model sees all of it in the injected summary.
    injected = str(main_requests(main)[-1][1].content)
    assert f"- {CONSTRAINT}" in injected.splitlines()
    for entry in ledger["tool_calls"]:
        assert f"id={entry['id']}" in injected


# --- 11. chunked summarization --------------------------------------------------------------


@tool
def read_report(order_id: str) -> str:
    """Read the long delivery report of an order."""
    return f"Delivery report for {order_id}. " + " ".join([FILLER] * 4)


FIRST_CHUNK = summary_text(
    "Collect the delivery reports of every order the user asks about, one at a time.",
    " ".join(
        f"The delivery report for order {order} was read: the warehouse scanned the parcel at "
        "the dock and the carrier confirmed the pickup window."
        for order in ORDERS
    ),
    "Orders " + ", ".join(ORDERS) + ".",
    "Read the remaining delivery reports, then answer the user's latest question.",
)
"""A realistic first-chunk answer (about 300 tokens) that the second call must carry."""


def test_large_folded_region_is_summarized_in_chunks_of_whole_exchanges() -> None:
    settings = Settings(
        trigger_messages=20,
        keep_messages=2,
        summary_input_budget=1000,
        memory_extraction=NO_MEMORY,
    )
    plan = {n: ("read_report", {"order_id": ORDERS[n - 1]}) for n in range(1, 6)}
    summarizer = ScriptedChatModel(
        script=[FIRST_CHUNK], responder=lambda m: demo_summary(prompt_text(m))
    )
    main = ScriptedChatModel(responder=order_agent(plan))
    session = make_session(
        main=main, summarizer=summarizer, settings=settings, tools=(read_report,)
    )
    session.turns(1, 2, 3, 4)
    assert summarizer.calls == 0
    session.turn(5)

    state = session.state()
    assert state["compaction"]["version"] == 1
    records = session.records()
    assert len(records) == 1
    folded = record_messages(records[0])
    assert describe(folded) == [m for n in range(1, 5) for m in turn_messages(n)]
    assert summarizer.calls > 1  # one compaction, several summary calls

    prompts = [prompt_text(r) for r in summarizer.requests]
    blocks = [block(p, "folded_messages") for p in prompts]
    for text in blocks:
        called = set(re.findall(r"^assistant called \w+\(.*\) \[(c\d+)\]$", text, re.M))
        answered = re.findall(r"^tool result \[(c\d+)\]", text, re.M)
        assert sorted(answered) == sorted(called), text
    assert "\n".join(blocks) == transcript(folded, max_chars=2 * settings.summary_input_budget)
    assert block(prompts[0], "previous_summary") == "(none yet)"
    assert block(prompts[1], "previous_summary") == render_sections(sections_of(FIRST_CHUNK))
    for later, earlier in zip(prompts[2:], summarizer.requests[1:], strict=False):
        answer = demo_summary(prompt_text(earlier))
        assert block(later, "previous_summary") == render_sections(sections_of(str(answer.content)))
    assert summary_requests(main) == []
    assert session.verify().ok
    # Settings.summary_input_budget is "the largest input to one summary call": that holds
    # for every call, including those that carry an earlier chunk's summary.
    counter = TokenCounter()
    sizes = [counter.count_messages(r) for r in summarizer.requests]
    assert max(sizes) <= settings.summary_input_budget, sizes


# --- 12. read_history -----------------------------------------------------------------------


def test_read_history_reads_the_archive_by_version_and_by_query(
    recwarn: pytest.WarningsRecorder,
) -> None:
    history_calls = AIMessage(
        content="",
        id="a4",
        tool_calls=[
            {"name": "read_history", "args": {"version": 1}, "id": "rh-version"},
            {"name": "read_history", "args": {"query": "A-1001"}, "id": "rh-query"},
            {"name": "read_history", "args": {"version": 7}, "id": "rh-missing"},
        ],
    )
    agent = order_agent()

    def reply(request: list[BaseMessage]) -> AIMessage:
        if latest_user(request).id != "h4":
            return agent(request)
        if isinstance(request[-1], ToolMessage):
            return AIMessage("A-1001 was the first order.", id="r4")
        return history_calls

    session = make_session(main=ScriptedChatModel(responder=reply), summarizer=demo_summarizer())
    session.turns(1, 2, 3)
    assert session.state()["compaction"]["version"] == 1
    result = session.graph.invoke(
        {"messages": [HumanMessage("What was my first order?", id="h4")]},
        session.config,
        context=CTX,
    )

    results = {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}
    by_version = results["rh-version"]
    assert by_version.status == "success"
    assert by_version.content == (
        "archive version 1 (8 folded messages):\n" + transcript_of(1) + "\n" + transcript_of(2)
    )
    by_query = results["rh-query"]
    assert by_query.status == "success"
    # An id alone is looked up exactly: every message naming it, its call too, oldest first.
    order_lines = transcript_of(1).splitlines()
    assert by_query.content == "\n".join(f"v1: {line}" for line in order_lines)
    missing = results["rh-missing"]
    assert missing.status == "error"
    assert "there is no archived compaction version 7" in str(missing.content)
    # The run went on: the model saw all three results and answered.
    assert result["messages"][-1].content == "A-1001 was the first order."
    last_request = main_requests(session.main)[-1]
    assert [m.tool_call_id for m in last_request if isinstance(m, ToolMessage)][-3:] == [
        "rh-version",
        "rh-query",
        "rh-missing",
    ]
    # Reading the archive is quiet: no serializer warnings about the injected runtime.
    noise = [
        str(w.message) for w in recwarn if "PydanticSerializationUnexpectedValue" in str(w.message)
    ]
    assert noise == []


# --- 13. async ------------------------------------------------------------------------------


async def test_async_invoke_compacts_the_same_way() -> None:
    summarizer = ScriptedChatModel(script=[SUMMARY_V1])
    session = make_session(summarizer=summarizer)
    for n in (1, 2, 3):
        await session.graph.ainvoke({"messages": [question(n)]}, session.config, context=CTX)

    state = (await session.graph.aget_state(session.config)).values
    assert summarizer.calls == 1
    assert block(prompt_text(summarizer.requests[0]), "folded_messages") == (
        transcript_of(1) + "\n" + transcript_of(2)
    )
    assert describe(state["messages"]) == turn_messages(3)
    assert state["compaction"]["version"] == 1
    assert state["compaction"]["cursor"] == 8
    assert state["summary"]["summary"] == sections_of(SUMMARY_V1)["summary"]
    assert session.store is not None
    records = await ThreadArchive(session.store, session.thread).arecords()
    assert [r["version"] for r in records] == [1]
    assert describe(record_messages(records[0])) == turn_messages(1) + turn_messages(2)
    report = await averify_thread(session.store, session.thread, state["compaction"])
    assert report == VerifyReport(True, 1, None, None)


# --- 14. interrupted commit -----------------------------------------------------------------


def test_leftover_archive_record_of_an_interrupted_commit_is_replaced() -> None:
    session = make_session(summarizer=ScriptedChatModel(script=[SUMMARY_V1]))
    assert session.store is not None
    stale = build_record(
        version=1,
        messages=[HumanMessage("an attempt that crashed before its state commit", id="stale")],
        summary={"schema_version": 1, "summary": "stale"},
        previous_cursor=0,
        previous_chain_hash=CHAIN_SEED,
    )
    ThreadArchive(session.store, session.thread).put(stale)
    session.turns(1, 2)
    assert session.records() == [stale]

    session.turn(3)
    state = session.state()
    records = session.records()
    assert len(records) == 1
    assert records[0]["chain_hash"] != stale["chain_hash"]
    assert describe(record_messages(records[0])) == turn_messages(1) + turn_messages(2)
    assert records[0]["checksum"] == state["compaction"]["checksum"]
    assert session.verify() == VerifyReport(True, 1, None, None)


# --- 15. no store ---------------------------------------------------------------------------


def test_graph_with_a_checkpointer_but_no_store_is_refused_at_build_time() -> None:
    with pytest.raises(ValueError, match=r"without store="):
        make_session(summarizer=demo_summarizer(), with_store=False)


# --- 16. a long session on Postgres ---------------------------------------------------------

VOCABULARY = (
    *("account", "address", "agenda", "answer", "budget", "calendar", "client", "contract"),
    *("customer", "deadline", "delivery", "design", "draft", "email", "estimate", "feature"),
    *("invoice", "issue", "meeting", "milestone", "note", "offer", "order", "payment", "plan"),
    *("price", "project", "proposal", "quote", "release", "report", "request", "review"),
    *("schedule", "shipment", "status", "supplier", "task", "team", "ticket", "update"),
    *("vendor", "version", "warehouse", "week"),
)
LINKS = ("the", "a", "of", "to", "and", "for", "with", "on", "about", "before", "after", "from")


def prose(rng: random.Random, words: int) -> str:
    picked = [rng.choice(VOCABULARY if i % 2 else LINKS) for i in range(words)]
    return " ".join(picked).capitalize() + "."


@tool
def search_notes(query: str) -> str:
    """Search the project notes."""
    rng = random.Random(query)
    return f"Notes matching {query}: " + prose(rng, rng.randint(300, 720))


def long_session_agent(request: list[BaseMessage]) -> AIMessage:
    n = int(str(latest_user(request).id)[1:])
    rng = random.Random(f"answer-{n}-{len(request)}")
    if isinstance(request[-1], HumanMessage) and n % 3 == 0:
        return tool_call("search_notes", {"query": f"topic {n}"}, f"c{n}", id=f"a{n}")
    return AIMessage(prose(rng, 30), id=f"r{n}")


def test_three_hundred_turns_on_postgres_stay_under_the_trigger(
    persistence: Persistence, thread_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        trigger_tokens=4000, trigger_messages=40, keep_messages=8, memory_extraction=NO_MEMORY
    )
    main = ScriptedChatModel(responder=long_session_agent)
    summarizer = demo_summarizer()
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=main, summary=summarizer),
        tools=[search_notes],
        settings=settings,
    )
    config = {"configurable": {"thread_id": thread_id}}
    rng = random.Random(300)
    sizes = [count_text(search_notes.invoke({"query": f"topic {n}"})) for n in range(3, 301, 3)]
    assert min(sizes) >= 300 and max(sizes) <= 800

    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        for n in range(1, 301):
            text = prose(rng, 40)
            graph.invoke({"messages": [HumanMessage(text, id=f"h{n}")]}, config, context=CTX)

    counter = TokenCounter()
    tokens = [counter.count_messages(request) for request in main.requests]
    assert len(main.requests) == 300 + 100
    assert max(tokens) <= settings.trigger_tokens, max(tokens)
    assert max(len(request) for request in main.requests) < settings.trigger_messages
    assert [r.getMessage() for r in caplog.records if r.name == "ctxgraph.compaction"] == []
    state = graph.get_state(config).values
    assert state["compaction"]["version"] > 10
    assert summarizer.calls == state["compaction"]["version"]
    assert verify_thread(persistence.store, thread_id, state["compaction"]).ok
    assert len(state["messages"]) < settings.trigger_messages
