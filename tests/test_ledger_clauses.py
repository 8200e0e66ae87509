"""Constraints by clause: the marked clause is kept, and its repeats fold into one line."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from ctxgraph.nodes.compaction.ledger import (
    Ledger,
    derive_ledger,
    empty_ledger,
    merge_ledgers,
    read_ledger,
    render_ledger,
)


def order_question(n: int) -> str:
    return f"第{n}个问题：请帮我查一下订单 X{n} 的物流状态，另外提醒我不要改收货地址。"


def constraint_lines(ledger: Ledger) -> list[str]:
    lines = render_ledger(ledger).splitlines()
    if "USER CONSTRAINTS (verbatim):" not in lines:
        return []
    start = lines.index("USER CONSTRAINTS (verbatim):") + 1
    return [line for line in lines[start:] if line.startswith("- ")]


def fold_turns(texts: list[str], per_compaction: int = 10) -> Ledger:
    ledger = empty_ledger()
    for start in range(0, len(texts), per_compaction):
        messages: list[BaseMessage] = []
        for text in texts[start : start + per_compaction]:
            messages += [HumanMessage(text), AIMessage("好的。")]
        ledger = merge_ledgers(ledger, derive_ledger(messages))
    return ledger


def test_the_order_question_repeated_138_times_is_one_line_with_its_count_and_turns() -> None:
    ledger = fold_turns([order_question(n) for n in range(128, 128 + 138)])
    assert constraint_lines(ledger) == ["- 不要改收货地址。 (said 138 times, turns 1–138)"]


def test_the_constraint_is_the_marked_clause_not_the_question_around_it() -> None:
    ledger = derive_ledger([HumanMessage(order_question(128))])
    assert [c["text"] for c in ledger["constraints"]] == ["不要改收货地址。"]


@pytest.mark.parametrize(
    "wordings",
    [
        ["Question 3: where is order A375? Also, please never change the shipping address."],
        ["Order X12 is late, remember: never change the shipping address."],
    ],
)
def test_english_wordings_keep_the_marked_clause(wordings: list[str]) -> None:
    ledger = fold_turns(wordings)
    assert [c["text"] for c in ledger["constraints"]] == ["never change the shipping address."]


def test_english_repeats_with_other_ids_and_question_numbers_fold() -> None:
    texts = [
        f"Question {n}: check order A{300 + n}, and remember to never refund it twice."
        for n in range(1, 6)
    ]
    assert constraint_lines(fold_turns(texts, per_compaction=2)) == [
        "- never refund it twice. (said 5 times, turns 1–5)"
    ]


def test_a_sentence_that_is_all_constraint_stays_whole() -> None:
    texts = [
        "Never refund more than $50.00 per order.",
        "Only use DHL, FedEx or UPS.",
        "If the parcel is late, never refund more than $1,200.",
        "I prefer short answers, one or two sentences at most.",
        "Do not, under any circumstances, touch prod-db-7.",
    ]
    ledger = derive_ledger([HumanMessage(text) for text in texts])
    assert [c["text"] for c in ledger["constraints"]] == texts


@pytest.mark.parametrize(
    "pair",
    [
        (
            "第1个问题：查一下订单 X1，另外不要超过500元。",
            "第2个问题：查一下订单 X2，另外不要超过800元。",
        ),
        ("Check A1. Also keep it under $50.", "Check A2. Also keep it under $80."),
        ("以后都寄到建国路88号，不要改。", "以后都寄到建国路99号，不要改。"),
        ("Never ship to 12 Baker Street.", "Never ship to 40 Oxford Road."),
        ("2026-09-02之前别发货。", "2026-09-09之前别发货。"),
        ("Never touch prod-db-7.", "Never touch prod-db-8."),
    ],
)
def test_a_different_value_is_a_different_constraint(pair: tuple[str, str]) -> None:
    lines = constraint_lines(fold_turns(list(pair)))
    assert len(lines) == 2
    assert all("said" not in line for line in lines)


def test_old_entries_without_a_first_turn_still_read_and_merge() -> None:
    old = {
        "constraints": ["Only use EUR.", {"text": "不要改收货地址", "count": 4, "last_turn": 9}],
        "user_turns": 9,
    }
    assert constraint_lines(read_ledger(old)) == [
        "- Only use EUR.",
        "- 不要改收货地址 (said 4 times, last in turn 9)",
    ]
    merged = merge_ledgers(old, derive_ledger([HumanMessage(order_question(5))]))
    assert constraint_lines(merged)[-1] == "- 不要改收货地址。 (said 5 times, last in turn 10)"
    once = read_ledger({"constraints": [{"text": "Only use EUR.", "count": 1, "last_turn": 3}]})
    again = merge_ledgers({**once, "user_turns": 3}, derive_ledger([HumanMessage("only use EUR!")]))
    assert constraint_lines(again) == ["- only use EUR! (said 2 times, turns 3–4)"]


def test_decisions_about_different_items_stay_apart() -> None:
    ledger = fold_turns(["Ship B456 to my office address.", "Ship B457 to my office address."])
    assert [d["text"] for d in ledger.get("decisions") or []] == [
        "Ship B456 to my office address.",
        "Ship B457 to my office address.",
    ]
