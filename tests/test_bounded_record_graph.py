"""A long thread whose user repeats a constraint every turn keeps a bounded record."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.ledger import (
    constraint_key,
    read_ledger,
    render_ledger,
    render_ledger_within,
)
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_summary
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, count_text
from ctxgraph.store.persistence.archive import ThreadArchive
from tests.support.scripted import (
    block,
    is_summary_request,
    main_requests,
    prompt_text,
    summary_requests,
)

CTX = Context(user_id="u")
ADDRESS = "不要改收货地址"
FORMS = ("{c}。", "{c}", "记得{c}。", "{c}！", "还是{c}。", "请{c}。")


@tool
def lookup_order(order_id: str) -> str:
    """Read an order."""
    return f"Order {order_id}: " + "packed at the Leeds depot, carrier DHL, no delay. " * 25


@tool
def charge_card(order_id: str) -> str:
    """Charge an order's card (a side effect)."""
    raise TimeoutError(f"gateway timed out for {order_id}")


def order(n: int) -> str:
    return f"ORD-{n:05d}"


def tied(n: int) -> bool:
    """Turns that tie the constraint to their order: a new constraint each time."""
    return n % 3 == 0


def user_text(n: int) -> str:
    if tied(n):
        said = f"{order(n)} 那边也一样，{ADDRESS}。"
    else:
        said = FORMS[n % len(FORMS)].format(c=ADDRESS)
    extra = f" Never refund {order(n)} more than ${n}.00." if n % 25 == 0 else ""
    return f"Turn {n}: please check order {order(n)}.{extra} {said}"


def agent(messages: list[BaseMessage]) -> AIMessage:
    """Every fourth turn charges a card (which times out), others look an order up."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(f"Noted the result for {last.tool_call_id}.")
    n = int(str(last.content).split()[1].rstrip(":"))
    name = "charge_card" if n % 4 == 0 else "lookup_order"
    return AIMessage("", tool_calls=[{"name": name, "args": {"order_id": order(n)}, "id": f"c{n}"}])


def request_tokens(model: ScriptedChatModel) -> list[tuple[int, int]]:
    """Tokens (tool schemas included) and messages of each main-model request."""
    counter = TokenCounter()
    sizes: list[tuple[int, int]] = []
    for messages, tools in zip(model.requests, model.tool_requests, strict=True):
        if is_summary_request(messages):
            continue
        schemas = count_text(json.dumps(tools, ensure_ascii=False, sort_keys=True))
        sizes.append((counter.count_messages(messages) + schemas, len(messages)))
    return sizes


def test_three_hundred_turns_with_a_constraint_each_keep_a_bounded_record() -> None:
    settings = Settings(
        memory_extraction="off",
        memory_mode="off",
        # Room for the built-in tools' schemas (read_history, read_artifact, grep_artifact);
        # the ledger keeps the budget of 300 tokens it had under a 1,800-token trigger.
        trigger_tokens=2_400,
        trigger_messages=24,
        keep_messages=6,
        summary_max_tokens=600,
        ledger_max_tokens=300,
        ledger_max_tool_calls=10,
        ledger_max_identifiers=30,
    )
    main = ScriptedChatModel(responder=agent)
    summarizer = ScriptedChatModel(responder=lambda messages: demo_summary(prompt_text(messages)))
    store = InMemoryStore()
    graph = build_graph(
        models=Models(main=main, summary=summarizer),
        tools=[lookup_order, charge_card],
        settings=settings,
        checkpointer=InMemorySaver(),
        store=store,
    )
    config: Any = {"configurable": {"thread_id": "long"}}
    streak = 0
    record_sizes: dict[int, int] = {}
    for n in range(1, 321):
        graph.invoke({"messages": [("user", user_text(n))]}, config, context=CTX)
        state = graph.get_state(config).values
        streak = max(streak, int((state.get("compaction_retry") or {}).get("attempts", 0)))
        record_sizes[n] = count_text(json.dumps(state.get("summary"), ensure_ascii=False))

    # Every request stayed under both triggers, and compactions kept committing.
    sizes = request_tokens(main)
    assert max(tokens for tokens, _ in sizes) < settings.trigger_tokens
    assert max(count for _, count in sizes) < settings.trigger_messages
    assert streak <= 2
    state = graph.get_state(config).values
    assert state["compaction"]["version"] >= 40
    assert len(state["messages"]) < settings.trigger_messages

    ledger = read_ledger(state["summary"]["ledger"])
    # The repeated constraint is one entry: its count is every folded turn that said it
    # in one of its wordings, and its text is the latest of them, verbatim.
    folded_turns = ledger["user_turns"]
    untied = [n for n in range(1, folded_turns + 1) if not tied(n)]
    standing = [c for c in ledger["constraints"] if constraint_key(c["text"]) == ADDRESS]
    assert standing == [
        {
            "text": FORMS[untied[-1] % len(FORMS)].format(c=ADDRESS),
            "count": len(untied),
            "last_turn": untied[-1],
            "first_turn": untied[0],
        }
    ]
    # The wording tied to an order ("ORD-00003 那边也一样，…") is one entry whatever the
    # order id; the refund caps (a different amount each) stay apart, the oldest folded.
    same = [c for c in ledger["constraints"] if "那边也一样" in c["text"]]
    assert [c["count"] for c in same] == [folded_turns // 3]
    assert ledger["folded_constraints"] > 0
    assert ledger["constraints"][-1]["last_turn"] == folded_turns
    lines = [line for line in render_ledger(ledger).splitlines() if line.startswith("- ")]
    constraint_lines = lines[-len(ledger["constraints"]) :]
    assert sum(count_text(line) + 1 for line in constraint_lines) <= settings.constraint_budget
    # Tool states stay within their bound, the rest counted.
    assert len(ledger["tool_calls"]) <= settings.ledger_max_tool_calls
    assert ledger["folded_calls"]["charge_card"]["unknown"] > 0
    assert len(ledger["identifiers"]) <= settings.ledger_max_identifiers
    # The ledger as the model sees it fits its budget and points at the archive.
    assert count_text(render_ledger_within(ledger, settings.ledger_budget)) <= (
        settings.ledger_budget
    )
    injected = str(main_requests(main)[-1][1].content)
    assert f"{ledger['folded_constraints']} older constraints are in the archive" in injected
    # A folded constraint is still readable in the archive.
    found = ThreadArchive(store, "long").search_messages(f"{order(3)} 那边也一样", 5)
    assert [str(message.content) for _, message in found] == [user_text(3)]
    # The record in the state stopped growing.
    assert record_sizes[320] <= 1.2 * record_sizes[160]


def test_each_refused_compaction_makes_the_next_attempt_keep_fewer_messages(
    caplog: pytest.LogCaptureFixture,
) -> None:
    healthy = False

    def summarize(messages: list[BaseMessage]) -> AIMessage:
        if not healthy:
            raise RuntimeError("summary service unavailable")
        return demo_summary(prompt_text(messages))

    def chat(messages: list[BaseMessage]) -> AIMessage:
        if is_summary_request(messages):
            raise RuntimeError("main model overloaded")
        return AIMessage(f"Answer {len(messages)}.")

    settings = Settings(
        memory_extraction="off",
        memory_mode="off",
        trigger_messages=14,
        keep_messages=8,
        summary_fallback="off",  # refusals, not a model-free record
    )
    summarizer = ScriptedChatModel(responder=summarize)
    main = ScriptedChatModel(responder=chat)
    graph = build_graph(
        models=Models(main=main, summary=summarizer),
        settings=settings,
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    config: Any = {"configurable": {"thread_id": "retry"}}
    caplog.set_level(logging.WARNING, logger="ctxgraph.compaction")
    reasons: list[dict[str, Any]] = []
    # Each question long enough that folding them saves more than the read_history schema
    # the first compaction binds.
    ask = " Where is the parcel now, and when does it leave the dock?" * 3
    for n in range(1, 10):
        graph.invoke({"messages": [HumanMessage(f"Question {n}.{ask}")]}, config, context=CTX)
        retry = graph.get_state(config).values.get("compaction_retry")
        if retry:
            reasons.append(retry)
    assert [r["attempts"] for r in reasons] == [1, 2, 3]
    assert all(r["reason"].startswith("no usable summary") for r in reasons)

    # Each attempt folded more than the turn in between added (two messages): every
    # refusal halved the messages the next one kept (8, then 4, then 2).
    folded = [block(prompt_text(r), "folded_messages").splitlines() for r in summarizer.requests]
    assert len(folded) == 3
    assert len(folded[1]) - len(folded[0]) == 2 + 4
    assert len(folded[2]) - len(folded[1]) == 2 + 2
    skipped = [r for r in caplog.records if "compaction skipped" in r.getMessage()]
    assert len(skipped) == 3

    # Once the summary works again, the compaction commits and the count is cleared.
    healthy = True
    graph.invoke({"messages": [HumanMessage(f"Question 10.{ask}")]}, config, context=CTX)
    state = graph.get_state(config).values
    assert state["compaction"]["version"] == 1
    assert state.get("compaction_retry") is None
    assert len(summary_requests(summarizer)) == 4
