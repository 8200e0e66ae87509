"""Constraints and decisions by what they are: questions and retractions are neither."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from bench.fidelity_bench import BenchConfig, run_ctxgraph, turns
from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.ledger import (
    bound_ledger,
    derive_ledger,
    empty_ledger,
    merge_ledgers,
    read_ledger,
    render_ledger,
    render_ledger_within,
)
from ctxgraph.nodes.compaction.ledger.sentences import sentence_kind
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from tests.support.scripted import demo_summarizer, is_summary_request

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_model"
RECORDED = DATA / "qwen2.5-coder-1.5b-instruct.jsonl"

DECISIONS_HEADING = "USER DECISIONS (verbatim, about the items they name):"

KINDS: list[tuple[str, str | None]] = [
    # The sentences of the issue.
    ("Ship B456 to my office address, not to my home.", "decision"),
    ("Is C789 eligible for a return if I don't like it?", None),
    ("What language should you answer in, and what should you never do without asking me?", None),
    ("Never mind F678.", None),
    # Constraints stay constraints.
    ("Never cancel an order without asking me first.", "constraint"),
    ("Please always answer in Chinese from now on.", "constraint"),
    ("Do not cancel A123.", "constraint"),
    ("不要改收货地址。", "constraint"),
    ("不要问我为什么。", "constraint"),  # a question word, said as a statement
    # Questions: a question mark (either width) or an interrogative opening.
    ("Can you check C789 for me", None),
    ("Do you still have A123 in stock", None),
    ("Should I never ship B456 to my home？", None),
    ("C789能退货吗", None),
    ("B456什么时候发货", None),
    # Retractions.
    ("Forget about F678.", None),
    ("算了，F678不用了。", None),
    # Decisions: an action and a target.
    ("Please cancel order C789.", "decision"),
    ("Hold the package until Friday.", "decision"),
    ("I want you to send A123 back to the warehouse.", "decision"),
    ("We'll use the blue box for B456.", "decision"),
    ("Let's go with the second option.", "decision"),
    (
        "Decision: we use Redis Streams instead of Kafka, because ops already runs Redis.",
        "decision",
    ),
    ("B456寄到我的办公室。", "decision"),
    ("取消C789的订单。", "decision"),
    # No target, an interjection, a report of what happened, a habit: none of them.
    ("Cancel it.", None),
    ("Keep answers short.", None),
    ("Wait, I meant C789.", None),
    ("B456已经发货了。", None),
    ("I use Python at work.", None),
    ("我还没决定A123怎么办。", None),
    ("My office address is 88 Harbour Road, Floor 12, Shenzhen.", None),
]


@pytest.mark.parametrize(("sentence", "kind"), KINDS)
def test_a_sentence_is_a_constraint_a_decision_or_neither(sentence: str, kind: str | None) -> None:
    assert sentence_kind(sentence) == kind


def _turns(*said: str) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for index, text in enumerate(said):
        messages += [HumanMessage(text, id=f"h{index}"), AIMessage("Noted.", id=f"a{index}")]
    return messages


def test_questions_and_retractions_are_not_recorded_and_decisions_are_verbatim() -> None:
    ledger = derive_ledger(
        _turns(
            "Never cancel an order without asking me first.",
            "Is C789 eligible for a return if I don't like it?",
            "Ship B456 to my office address, not to my home.",
            "Never mind F678.",
            "What language should you answer in, and what should you never do without asking me?",
        )
    )
    assert [c["text"] for c in ledger["constraints"]] == [
        "Never cancel an order without asking me first."
    ]
    assert ledger.get("decisions") == [
        {
            "text": "Ship B456 to my office address, not to my home.",
            "count": 1,
            "last_turn": 3,
            "first_turn": 3,
        }
    ]
    lines = render_ledger(ledger).splitlines()
    assert lines[:4] == [
        "USER CONSTRAINTS (verbatim):",
        "- Never cancel an order without asking me first.",
        DECISIONS_HEADING,
        "- Ship B456 to my office address, not to my home.",
    ]
    # B456 is shown by the decision's line, so IDENTIFIERS does not list it again.
    assert not any(line.startswith("IDENTIFIERS") and "B456" in line for line in lines)


def test_a_decision_a_side_effect_call_carried_out_is_left_to_the_call_line() -> None:
    def refund(order: str, call_id: str, turn_text: str) -> list[BaseMessage]:
        return [
            HumanMessage(turn_text),
            AIMessage(
                "",
                tool_calls=[{"name": "refund_order", "args": {"order_id": order}, "id": call_id}],
            ),
            ToolMessage("refunded", tool_call_id=call_id),
            AIMessage("Done."),
        ]

    ledger = derive_ledger(
        [
            *refund("A-1030", "r1", "Refund A-1030 and tell the customer."),
            # A call on another order does not carry out this decision.
            *refund("A-1031", "r2", "Refund A-1032 as well."),
        ]
    )
    assert [d["text"] for d in ledger.get("decisions") or []] == ["Refund A-1032 as well."]
    # A read-only call carries out nothing.
    looked_up = derive_ledger(
        [
            HumanMessage("Cancel order C789."),
            AIMessage(
                "", tool_calls=[{"name": "lookup_order", "args": {"order_id": "C789"}, "id": "l1"}]
            ),
            ToolMessage("pending", tool_call_id="l1"),
        ]
    )
    assert [d["text"] for d in looked_up.get("decisions") or []] == ["Cancel order C789."]


def test_a_ledger_without_decisions_keeps_its_shape() -> None:
    ledger = derive_ledger(_turns("Never refund more than $50.00.", "Where is A123?"))
    assert "decisions" not in ledger and "folded_decisions" not in ledger
    assert "decisions" not in read_ledger({"constraints": ["Only use EUR."]})
    assert DECISIONS_HEADING not in render_ledger(ledger)


def test_decisions_merge_across_compactions_with_their_turns() -> None:
    first = derive_ledger(_turns("Hi.", "Ship B456 to my office address, not to my home."))
    second = derive_ledger(
        _turns(
            "Please cancel order C789.", "Remember: ship B456 to my office address, not to my home!"
        )
    )
    merged = merge_ledgers(first, second)
    # The repeat is one entry, with its latest wording, a count and the turn past the first.
    assert merged.get("decisions") == [
        {"text": "Please cancel order C789.", "count": 1, "last_turn": 3, "first_turn": 3},
        {
            "text": "Remember: ship B456 to my office address, not to my home!",
            "count": 2,
            "last_turn": 4,
            "first_turn": 2,
        },
    ]
    again = merge_ledgers(merged, derive_ledger(_turns("Thanks.")))
    assert again.get("decisions") == merged.get("decisions")


def _decision(n: int) -> str:
    return f"Ship order ORD-{n:05d} to the Leeds depot, not to the customer's home address."


def test_decisions_are_bounded_like_constraints_within_a_budget_of_their_own() -> None:
    constraints = [f"Never refund more than ${n}.00 for ORD-{n:05d}." for n in range(3)]
    said = [*constraints, *(_decision(n) for n in range(40))]
    ledger = derive_ledger(_turns(*said))
    without = derive_ledger(_turns(*constraints))
    budget = 200
    bounded = bound_ledger(
        ledger, max_tool_calls=10, max_identifiers=50, max_constraint_tokens=budget
    )
    alone = bound_ledger(
        without, max_tool_calls=10, max_identifiers=50, max_constraint_tokens=budget
    )
    # The constraints are kept exactly as they would be without any decision.
    assert bounded["constraints"] == alone["constraints"]
    assert bounded["folded_constraints"] == alone["folded_constraints"]
    kept = bounded.get("decisions") or []
    assert 1 <= len(kept) < 40
    assert kept[-1]["text"] == _decision(39)  # the newest stay, the oldest fold
    assert bounded.get("folded_decisions") == 40 - len(kept)
    assert "older decisions are in the archive (read_history)" in render_ledger(bounded)
    # Bounding again keeps the count: folded decisions are never counted twice.
    twice = bound_ledger(
        bounded, max_tool_calls=10, max_identifiers=50, max_constraint_tokens=budget
    )
    assert twice.get("folded_decisions") == bounded.get("folded_decisions")


def test_a_tight_rendering_keeps_constraints_before_decisions_and_counts_the_rest() -> None:
    ledger = derive_ledger(
        _turns("Never cancel an order without asking me first.", *map(_decision, range(6)))
    )
    text = render_ledger_within(ledger, 120)
    assert "- Never cancel an order without asking me first." in text
    assert _decision(5) in text  # the newest decision comes first
    assert _decision(0) not in text
    shown = sum(1 for line in text.splitlines() if line.startswith("- Ship order"))
    assert f"{6 - shown} older decisions are in the archive (read_history)" in text


def _recorded_user_turns() -> list[str]:
    if not DATA.is_dir():
        pytest.skip(f"recorded real-model outputs not found at {DATA}")
    rows = [json.loads(line) for line in RECORDED.read_text(encoding="utf-8").splitlines()]
    session = sorted(
        (row for row in rows if row["source"] == "session" and row["role"] == "main"),
        key=lambda row: row["turn"],
    )
    return [row["user_turn"] for row in session]


def test_the_recorded_session_gives_its_constraints_and_its_one_decision() -> None:
    said = _recorded_user_turns()
    assert len(said) == 17
    ledger = derive_ledger(_turns(*said))
    assert [c["text"] for c in ledger["constraints"]] == [
        "Please always answer in Chinese from now on.",
        "Never cancel an order without asking me first.",
        "I prefer short answers, one or two sentences at most.",
    ]
    # Before, "What language should you answer in, and what should you never do without
    # asking me?" was a constraint too, and the decision was only in the archive.
    assert [d["text"] for d in ledger.get("decisions") or []] == [
        "Ship B456 to my office address, not to my home."
    ]


def _main(messages: list[BaseMessage]) -> AIMessage:
    if is_summary_request(messages):
        raise AssertionError("the summary model answers summary calls")
    return AIMessage(f"Answer {len(messages)}.")


def test_the_main_model_reads_the_decision_after_it_is_folded() -> None:
    main = ScriptedChatModel(responder=_main)
    graph = build_graph(
        models=Models(main=main, summary=demo_summarizer()),
        settings=Settings(
            trigger_messages=8, keep_messages=2, memory_extraction="off", memory_mode="off"
        ),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    config: Any = {"configurable": {"thread_id": "decisions"}}
    said = [
        "Ship B456 to my office address, not to my home.",
        "Is C789 eligible for a return if I don't like it?",
        "Never mind F678.",
        *(f"Tell me about the weather on day {n}." for n in range(8)),
    ]
    for text in said:
        graph.invoke({"messages": [HumanMessage(text)]}, config, context=Context(user_id="u"))
    values = graph.get_state(config).values
    assert values["compaction"]["version"] >= 2
    assert not any("B456" in str(m.content) for m in values["messages"])  # folded
    request = "\n".join(str(m.content) for m in main.requests[-1])
    assert f"{DECISIONS_HEADING}\n- Ship B456 to my office address, not to my home." in request
    assert "- Is C789 eligible" not in request
    assert "- Never mind F678." not in request


def test_the_fidelity_benchmark_decision_probe_is_in_the_request_every_round() -> None:
    config = BenchConfig(compactions=4, seed=7, trigger_messages=10, keep_messages=4)
    texts, _ = turns(config)
    score = run_ctxgraph(texts, config, None, "ctxgraph (scripted)")
    decision = [row["decision + reason"] for row in score.rows]
    assert len(decision) == 4
    assert set(decision) <= {"request", "not yet planted"}
    assert decision[-1] == "request"
    assert score.degraded == 0


def test_an_empty_ledger_has_no_decision_block() -> None:
    assert DECISIONS_HEADING not in render_ledger(empty_ledger())
