"""Compaction under a tight token trigger: fewer kept messages, a ledger within budget."""

from __future__ import annotations

import json
import logging

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.ledger import render_ledger, render_ledger_within
from ctxgraph.state import Context, Models, Settings, SettingsError
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, count_text
from tests.support.scripted import demo_summarizer, main_requests

REPORT = "quarterly figures " * 350  # about 700 tokens per tool result


@tool
def fetch_report(name: str) -> str:
    """Fetch a long report."""
    return f"report {name}: {REPORT}"


@tool
def send_email(to: str) -> str:
    """Send an e-mail (a side effect)."""
    return f"sent to {to}"


def request_sizes(main: ScriptedChatModel) -> list[int]:
    """Tokens of each main-model request, with the schemas of the tools bound to it."""
    counter = TokenCounter()
    return [
        counter.count_messages(messages)
        + count_text(json.dumps(tools, ensure_ascii=False, sort_keys=True))
        for messages, tools in zip(main.requests, main.tool_requests, strict=True)
    ]


def agent(messages: list[BaseMessage]) -> AIMessage:
    """Every user turn fetches two reports and sends an e-mail, then answers."""
    last = messages[-1]
    # The turn number rides in the user text, so call ids stay unique after compaction.
    users = [m for m in messages if m.type == "human" and not m.additional_kwargs]
    turn = int(str(users[-1].content).split()[-1])
    if last.type == "human":
        return AIMessage(
            content="",
            tool_calls=[
                {"name": "fetch_report", "args": {"name": f"r{turn}"}, "id": f"f{turn}"},
                {"name": "fetch_report", "args": {"name": f"s{turn}"}, "id": f"g{turn}"},
                {
                    "name": "send_email",
                    "args": {"to": f"u{turn}@example.com"},
                    "id": f"e{turn}",
                },
            ],
        )
    assert isinstance(last, ToolMessage)
    return AIMessage(content=f"Done with turn {turn}.")


def test_kept_messages_shrink_so_every_request_stays_under_the_trigger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings(
        memory_extraction="off",
        trigger_tokens=3_600,
        trigger_messages=40,
        keep_messages=8,
        summary_max_tokens=600,
        ledger_max_tokens=150,
    )
    main = ScriptedChatModel(responder=agent)
    graph = build_graph(
        models=Models(main=main, summary=demo_summarizer()),
        tools=[fetch_report, send_email],
        settings=settings,
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    config = {"configurable": {"thread_id": "tight"}}
    caplog.set_level(logging.WARNING, logger="ctxgraph.compaction")
    for turn in range(12):
        graph.invoke({"messages": [("user", f"turn {turn}")]}, config, context=Context(user_id="u"))

    sizes = request_sizes(main)
    assert max(sizes) <= settings.trigger_tokens, sizes
    state = graph.get_state(config).values
    assert state["compaction"]["version"] >= 3
    # keep_messages=8 cannot fit under a 3,600-token trigger with 700-token results, so
    # every compaction kept fewer messages instead of failing verification.
    assert not [r for r in caplog.records if "compaction skipped" in r.getMessage()]
    # The ledger keeps every e-mail (a side effect) in the state...
    emails = [e for e in state["summary"]["ledger"]["tool_calls"] if e["name"] == "send_email"]
    assert len(emails) >= 6
    # ...while the request shows it within the ledger budget, the rest counted.
    injected = main_requests(main)[-1][1]
    assert injected.additional_kwargs["origin"] == "summary"
    full = count_text(render_ledger(state["summary"]["ledger"]))
    assert full > settings.ledger_budget  # so the request cannot show every entry
    assert "Older successes not listed here (all succeeded):" in str(injected.content)


def test_ledger_budget_is_at_most_a_sixth_of_the_trigger() -> None:
    assert Settings(trigger_tokens=4_000).ledger_budget == 666
    assert Settings().ledger_budget == 1_000
    ledger = {"tool_calls": [], "aggregated": {}, "constraints": [], "identifiers": ["A-1001"]}
    assert render_ledger_within(ledger, 100) == "IDENTIFIERS: A-1001"  # type: ignore[arg-type]


@pytest.mark.parametrize("target", [0.1, 1.5, True])
def test_compaction_target_is_validated(target: object) -> None:
    with pytest.raises(SettingsError, match=r"compaction_target must be a number from 0.3 to 1"):
        Settings(compaction_target=target)  # type: ignore[arg-type]


# --- a record too large for the trigger is shrunk before it is judged ---------------------

ORDERS_PER_MESSAGE = 50


def long_summary(prompt: str) -> AIMessage:
    """Four sections close to the summary limit (about 1,250 tokens, no outcome words)."""
    filler = " ".join(["Orders were reviewed with the customer today."] * 150)
    return AIMessage(
        content=f"SESSION INTENT\nReview the orders.\nSUMMARY\n{filler}\n"
        "ARTIFACTS\nSee the ledger.\nNEXT STEPS\nContinue."
    )


def order_list(turn: int) -> str:
    """A user message naming many orders: each becomes an identifier in the ledger."""
    orders = ", ".join(f"ORD-{turn:02d}{n:03d}" for n in range(ORDERS_PER_MESSAGE))
    return f"Turn {turn}: review these orders carefully please: {orders}. " + "Note " * 900


def test_a_record_over_the_trigger_is_shrunk_before_the_compaction_is_judged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings(
        memory_extraction="off",
        memory_mode="off",
        trigger_tokens=2_860,  # no tool schema is bound before the first compaction
        trigger_messages=100,
        keep_messages=2,
        summary_max_tokens=1_400,
        ledger_max_tokens=500,
    )
    main = ScriptedChatModel(responder=lambda messages: AIMessage("Reviewed."))
    summary_model = ScriptedChatModel(responder=lambda messages: long_summary(""))
    graph = build_graph(
        models=Models(main=main, summary=summary_model),
        settings=settings,
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    config = {"configurable": {"thread_id": "shrink"}}
    caplog.set_level(logging.INFO, logger="ctxgraph.compaction")
    for turn in range(1, 4):
        graph.invoke(
            {"messages": [("user", order_list(turn))]}, config, context=Context(user_id="u")
        )

    state = graph.get_state(config).values
    assert state["compaction"]["version"] == 1
    assert not [r for r in caplog.records if "compaction skipped" in r.getMessage()]
    shrunk = [r.getMessage() for r in caplog.records if "record shrunk" in r.getMessage()]
    assert len(shrunk) == 1
    # The ledger's bounds were halved until the request fit: the newest identifiers stay.
    identifiers = state["summary"]["ledger"]["identifiers"]
    assert 0 < len(identifiers) < 2 * ORDERS_PER_MESSAGE
    assert identifiers[-1] == f"ORD-02{ORDERS_PER_MESSAGE - 1:03d}"
    assert max(request_sizes(main)) < settings.trigger_tokens
