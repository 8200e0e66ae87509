"""The bounded record: constraints de-duplicated and folded, tool states bounded, old shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxgraph.nodes.compaction.ledger import (
    Ledger,
    bound_ledger,
    constraint_key,
    derive_ledger,
    empty_ledger,
    find_contradictions,
    merge_ledgers,
    read_ledger,
    render_ledger,
    render_ledger_within,
)
from ctxgraph.nodes.compaction.render import render_summary
from ctxgraph.state import Settings, SettingsError
from ctxgraph.state.graph_state import add_refusals
from ctxgraph.state.tokens import count_text

ADDRESS = "不要改收货地址"


def fold(ledger: Ledger, messages: list[BaseMessage], **bounds: Any) -> Ledger:
    """One compaction's ledger step, stored and read back as a checkpoint would."""
    limits = {"max_tool_calls": 40, "max_identifiers": 200, **bounds}
    merged = bound_ledger(merge_ledgers(ledger, derive_ledger(messages)), **limits)
    stored: Ledger = json.loads(json.dumps(merged))
    return stored


# --- what "the same constraint" means ---------------------------------------------------


@pytest.mark.parametrize(
    "wording",
    [
        "不要改收货地址。",
        "不要改收货地址",
        "不要改 收货地址！",
        "记得不要改收货地址。",
        "还是不要改收货地址…",
        "请不要改收货地址",
        "也不要改收货地址。",
        "Remember: 不要改收货地址.",
        "（不要改收货地址）",
    ],
)
def test_wordings_of_one_constraint_share_a_key(wording: str) -> None:
    assert constraint_key(wording) == constraint_key("不要改收货地址。") == ADDRESS


def test_english_wordings_differ_only_in_case_punctuation_and_fillers() -> None:
    key = constraint_key("Only use EUR.")
    assert constraint_key("only use eur") == key
    assert constraint_key("Please, only use EUR!") == key
    assert constraint_key("Remember to only   use EUR.") == key
    assert constraint_key("Also: only use EUR.") == key


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Never refund more than $200.", "Never refund more than €200."),
        ("Never refund more than $200.", "Never refund more than $2000."),
        ("不要改收货地址。", "不要改账单地址。"),
        ("Andrew must approve refunds.", "Drew must approve refunds."),
    ],
)
def test_different_constraints_keep_different_keys(first: str, second: str) -> None:
    assert constraint_key(first) != constraint_key(second)


# --- counts and turns -------------------------------------------------------------------


def test_a_constraint_said_every_turn_is_one_entry_with_a_count_and_its_last_turn() -> None:
    forms = ("{c}。", "{c}", "记得{c}。", "{c}！", "还是{c}。")
    ledger = empty_ledger()
    for turn in range(300):
        said = forms[turn % len(forms)].format(c=ADDRESS)
        ledger = fold(
            ledger,
            [HumanMessage(f"Look at order ORD-{turn:05d}. {said}"), AIMessage("Done.")],
            max_constraint_tokens=400,
        )
    assert ledger["constraints"] == [
        {"text": "还是不要改收货地址。", "count": 300, "last_turn": 300, "first_turn": 1}
    ]
    assert ledger["user_turns"] == 300
    assert ledger["folded_constraints"] == 0
    assert render_ledger(ledger).splitlines()[0:2] == [
        "USER CONSTRAINTS (verbatim):",
        "- 还是不要改收货地址。 (said 300 times, turns 1–300)",
    ]


def test_turns_number_real_user_messages_across_compactions() -> None:
    first = derive_ledger(
        [HumanMessage("Only use EUR."), AIMessage("ok"), HumanMessage("Never charge twice.")]
    )
    assert [(c["text"], c["last_turn"]) for c in first["constraints"]] == [
        ("Only use EUR.", 1),
        ("Never charge twice.", 2),
    ]
    second = derive_ledger(
        [
            HumanMessage("Injected.", additional_kwargs={"origin": "memory"}),
            HumanMessage("only use eur!"),
        ]
    )
    merged = merge_ledgers(first, second)
    assert merged["user_turns"] == 3
    # The repeat moved to the end, with the new wording, count 2 and turn 2 + 1.
    assert merged["constraints"] == [
        {"text": "Never charge twice.", "count": 1, "last_turn": 2, "first_turn": 2},
        {"text": "only use eur!", "count": 2, "last_turn": 3, "first_turn": 1},
    ]


# --- folding the oldest constraints -------------------------------------------------------


def many_constraints(count: int) -> list[BaseMessage]:
    return [
        message
        for n in range(count)
        for message in (
            HumanMessage(f"Never refund order ORD-{n:05d} more than ${n + 10}.00 this week."),
            AIMessage("Noted."),
        )
    ]


def test_oldest_constraints_fold_first_under_the_budget_and_are_counted() -> None:
    budget = 120
    ledger = fold(empty_ledger(), many_constraints(40), max_constraint_tokens=budget)
    kept = ledger["constraints"]
    assert 1 < len(kept) < 40
    assert ledger["folded_constraints"] == 40 - len(kept)
    # The kept ones are the newest, in order, verbatim.
    assert [c["last_turn"] for c in kept] == list(range(41 - len(kept), 41))
    assert kept[-1]["text"] == "Never refund order ORD-00039 more than $49.00 this week."
    lines = render_ledger(ledger).splitlines()
    constraint_lines = [line for line in lines if line.startswith("- Never refund")]
    assert sum(count_text(line) + 1 for line in constraint_lines) <= budget
    folded = ledger["folded_constraints"]
    assert f"{folded} older constraints are in the archive (read_history)" in lines
    # A later compaction folds more of the old ones and keeps counting.
    more = fold(ledger, many_constraints(45)[80:], max_constraint_tokens=budget)
    assert more["folded_constraints"] == folded + 5
    assert more["constraints"][-1]["text"].startswith("Never refund order ORD-00044 ")


def test_the_constraint_said_last_survives_verbatim_even_over_the_budget() -> None:
    long = "Never " + " ".join(f"touch file{n}.txt" for n in range(80)) + "."
    ledger = fold(
        empty_ledger(),
        [HumanMessage("Only use EUR."), HumanMessage(long)],
        max_constraint_tokens=20,
    )
    assert [c["text"] for c in ledger["constraints"]] == [long]
    assert ledger["folded_constraints"] == 1
    assert "1 older constraint is in the archive (read_history)" in render_ledger(ledger)
    # The request view keeps it too, whatever its budget.
    assert f"- {long}" in render_ledger_within(ledger, 50).splitlines()


def test_a_folded_constraint_said_again_comes_back_as_the_newest() -> None:
    ledger = fold(empty_ledger(), many_constraints(30), max_constraint_tokens=100)
    assert not [c for c in ledger["constraints"] if "ORD-00000" in c["text"]]
    again = fold(
        ledger,
        [HumanMessage("Never refund order ORD-00000 more than $10.00 this week!")],
        max_constraint_tokens=100,
    )
    assert again["constraints"][-1] == {
        "text": "Never refund order ORD-00000 more than $10.00 this week!",
        "count": 1,
        "last_turn": 31,
        "first_turn": 31,
    }


# --- tool-call states stay bounded --------------------------------------------------------


def failing_round(n: int) -> list[BaseMessage]:
    return [
        HumanMessage(f"Charge order ORD-{n:05d}."),
        AIMessage(
            "",
            tool_calls=[
                {"name": "charge_card", "args": {"order": f"ORD-{n:05d}"}, "id": f"c{n}"},
                {"name": "lookup_order", "args": {"order": f"ORD-{n:05d}"}, "id": f"l{n}"},
                {"name": "send_email", "args": {"to": f"u{n}@example.com"}, "id": f"e{n}"},
            ],
        ),
        ToolMessage("Error: gateway timed out", tool_call_id=f"c{n}", status="error"),
        ToolMessage("Error: order not found", tool_call_id=f"l{n}", status="error"),
        ToolMessage("sent", tool_call_id=f"e{n}"),
        AIMessage("The charge timed out."),
    ]


def test_non_success_states_are_bounded_over_a_thousand_compactions() -> None:
    ledger = empty_ledger()
    sizes: list[int] = []
    for n in range(1_000):
        ledger = fold(ledger, failing_round(n), max_tool_calls=12, max_constraint_tokens=200)
        sizes.append(len(json.dumps(ledger, ensure_ascii=False)))
    # Only the newest side effects of unknown outcome stay listed...
    assert [e["id"] for e in ledger["tool_calls"]] == [f"c{n}" for n in range(988, 1_000)]
    # ...everything else is counted per tool and status, and no call goes uncounted.
    assert ledger["folded_calls"] == {
        "lookup_order": {"failed": 1_000},
        "send_email": {"succeeded": 1_000},
        "charge_card": {"unknown": 988},
    }
    assert len(ledger["identifiers"]) == 200
    # The stored ledger stops growing once its bounds are reached.
    assert max(sizes[500:]) <= 1.05 * sizes[499]
    text = render_ledger(ledger)
    assert "Older calls in the archive (read_history): lookup_order failed ×1000" in text
    # A summary calling a folded failure a success is still caught by the tool's name.
    claim = "lookup_order succeeded for every order."
    assert find_contradictions(claim, ledger) == [
        "the summary says lookup_order (folded calls) succeeded, but the ledger records it "
        f'as failed: "{claim}"'
    ]
    # A name whose calls had different outcomes is not checkable by name.
    assert find_contradictions("send_email failed.", ledger) != []
    mixed = read_ledger({**ledger, "aggregated": {"lookup_order": 1}})
    assert find_contradictions(claim, mixed) == []


def test_rendering_within_a_budget_holds_even_for_non_success_states() -> None:
    ledger = empty_ledger()
    for n in range(40):
        ledger = fold(ledger, failing_round(n), max_tool_calls=40, max_constraint_tokens=200)
    ledger = fold(ledger, [HumanMessage(f"{ADDRESS}。")], max_constraint_tokens=200)
    full = render_ledger(ledger)
    assert count_text(full) > 1_000
    for budget in (120, 250, 600):
        text = render_ledger_within(ledger, budget)
        assert count_text(text) <= budget
        assert f"- {ADDRESS}。" in text.splitlines()  # the newest constraint comes first
        listed = text.count("- [unknown] charge_card")
        # Non-success states are listed newest first, side effects before read-only ones,
        # and those left out are counted as being in the archive.
        if listed:
            assert "id=c39 " in text or text.endswith("id=c39")
        assert "Older calls in the archive (read_history):" in text
    assert render_ledger_within(ledger, 100_000) == full


# --- older records ------------------------------------------------------------------------

OLD_LEDGER: dict[str, Any] = {
    "tool_calls": [
        {
            "id": "c1",
            "name": "charge_card",
            "args": {"amount": "30.00"},
            "status": "unknown",
            "error": "timed out",
            "idempotency_key": "k-1",
            "side_effect": True,
        }
    ],
    "aggregated": {"lookup_order": 3},
    "constraints": ["Only use EUR.", "不要改收货地址。", "不要改收货地址"],
    "identifiers": ["A-1001"],
}
"""A ledger as records before this version stored it: constraints as plain strings."""


def test_an_old_record_reads_as_entries_without_turns() -> None:
    ledger = read_ledger(OLD_LEDGER)
    assert ledger["constraints"] == [
        {"text": "Only use EUR.", "count": 1, "last_turn": 0, "first_turn": 0},
        {"text": "不要改收货地址", "count": 2, "last_turn": 0, "first_turn": 0},
    ]
    assert ledger["folded_calls"] == {}
    assert ledger["folded_constraints"] == 0
    assert ledger["user_turns"] == 0
    assert OLD_LEDGER["constraints"][0] == "Only use EUR."  # the input is not changed
    assert render_ledger(OLD_LEDGER).splitlines()[-4:] == [
        "USER CONSTRAINTS (verbatim):",
        "- Only use EUR.",
        "- 不要改收货地址 (said 2 times)",
        "IDENTIFIERS: A-1001",
    ]
    view = render_summary({"summary": "s", "ledger": OLD_LEDGER}, 3, 500)
    assert "- [unknown] charge_card(amount=30.00) id=c1 idempotency_key=k-1" in view


def test_an_old_record_merges_with_new_turns() -> None:
    new = derive_ledger([HumanMessage("不要改收货地址！"), HumanMessage("Never charge twice.")])
    merged = merge_ledgers(OLD_LEDGER, new)
    assert merged["constraints"] == [
        {"text": "Only use EUR.", "count": 1, "last_turn": 0, "first_turn": 0},
        {"text": "不要改收货地址！", "count": 3, "last_turn": 1, "first_turn": 0},
        {"text": "Never charge twice.", "count": 1, "last_turn": 2, "first_turn": 2},
    ]
    assert merged["aggregated"] == {"lookup_order": 3}
    assert merged["tool_calls"][0]["id"] == "c1"
    assert merged["user_turns"] == 2


# --- settings and the refusal counter -----------------------------------------------------


def test_constraint_budget_is_a_share_of_the_ledger_budget() -> None:
    assert Settings().constraint_budget == 400
    assert Settings(trigger_tokens=4_000).constraint_budget == 266
    assert Settings(ledger_constraint_share=1).constraint_budget == 1_000


@pytest.mark.parametrize("share", [0, 1.5, True, "half"])
def test_constraint_share_is_validated(share: object) -> None:
    with pytest.raises(
        SettingsError, match=r"ledger_constraint_share must be a number in \(0, 1\], for example"
    ):
        Settings(ledger_constraint_share=share)  # type: ignore[arg-type]


def test_refusals_add_up_until_a_commit_clears_them() -> None:
    first = add_refusals(None, {"attempts": 1, "reason": "a"})
    second = add_refusals(first, {"attempts": 1, "reason": "b"})
    assert second == {"attempts": 2, "reason": "b"}
    assert add_refusals(second, None) is None
    assert add_refusals(None, {"attempts": 1, "reason": "c"}) == {"attempts": 1, "reason": "c"}
