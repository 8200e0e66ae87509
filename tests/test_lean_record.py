"""The lean ledger rendering: one line per read-only tool, constraints once, no repeated ids."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxgraph.nodes.compaction.ledger import (
    Ledger,
    ToolCallEntry,
    bound_ledger,
    derive_ledger,
    empty_ledger,
    find_contradictions,
    merge_ledgers,
    render_ledger,
    render_ledger_within,
)
from ctxgraph.nodes.compaction.render import render_summary
from ctxgraph.nodes.compaction.verify import summary_problems
from ctxgraph.state.identifiers import shown_verbatim
from ctxgraph.state.settings import Settings
from ctxgraph.state.summary import SUMMARY_SCHEMA_VERSION
from ctxgraph.state.tokens import count_text

WORDINGS = (
    "Do not change the shipping address.",
    "please do not change the shipping address!",
    "Remember: do NOT change the shipping address",
    "Do not change the  shipping address.",
)
"""One constraint, said in four wordings (filler words, case, punctuation, spacing)."""


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


def lookups(first: int, last: int) -> list[BaseMessage]:
    """A user turn per order from ``first`` to ``last``, each with one lookup and its result."""
    messages: list[BaseMessage] = []
    for n in range(first, last + 1):
        messages += [
            HumanMessage(f"Look up order A-{1000 + n}. {WORDINGS[n % 4]}"),
            AIMessage("", tool_calls=[call("lookup_order", f"look_{n}", order_id=f"A-{1000 + n}")]),
            ToolMessage(content=f"order A-{1000 + n} shipped", tool_call_id=f"look_{n}"),
        ]
    return messages


def side_effects() -> list[BaseMessage]:
    """A refund and an e-mail that succeed, and a charge that fails."""
    return [
        HumanMessage("Refund A-1030 and tell the customer. Never refund more than $40.00."),
        AIMessage(
            "",
            tool_calls=[
                call(
                    "refund_order",
                    "refund_1",
                    order_id="A-1030",
                    amount="40.00",
                    idempotency_key="rf-1030",
                ),
                call("send_email", "email_1", to="kim@example.com"),
                call("charge_card", "charge_1", amount="5.00", idempotency_key="ch-77"),
            ],
        ),
        ToolMessage(content="refunded", tool_call_id="refund_1"),
        ToolMessage(content="sent", tool_call_id="email_1"),
        ToolMessage(content="Error: card declined", tool_call_id="charge_1", status="error"),
        AIMessage("Done."),
    ]


def thirty_lookups() -> Ledger:
    return merge_ledgers(empty_ledger(), derive_ledger([*lookups(1, 30), *side_effects()]))


REFUND_LINE = (
    "- [succeeded] refund_order(order_id=A-1030, amount=40.00, idempotency_key=rf-1030) id=refund_1"
)
CHARGE_LINE = (
    "- [failed] charge_card(amount=5.00, idempotency_key=ch-77) id=charge_1"
    " — error: Error: card declined"
)
LATEST_ORDERS = "A-1027, A-1028, A-1029"
"""The latest three orders only looked up; the 26 before them are in the archive index."""

THIRTY_LOOKUPS_TEXT = (
    "TOOL CALLS (recorded by code, authoritative):\n"
    "- [succeeded] lookup_order ×30 (read-only), turns 1–30, latest: order_id=A-1030\n"
    f"{REFUND_LINE}\n"
    "- [succeeded] send_email(to=kim@example.com) id=email_1\n"
    f"{CHARGE_LINE}\n"
    "USER CONSTRAINTS (verbatim):\n"
    "- do NOT change the shipping address (said 30 times, turns 1–30)\n"
    "- Never refund more than $40.00.\n"
    f"IDENTIFIERS: {LATEST_ORDERS}\n"
    "Older looked-up identifiers in the archive (read_history query=<id>): 26"
)
"""The whole record: the 30 lookups on one line, the repeated constraint once (its latest
wording), the latest three orders only looked up (the others counted as in the archive)."""


def test_thirty_lookups_two_side_effects_and_a_failure_render_exactly() -> None:
    ledger = thirty_lookups()
    assert len(ledger["tool_calls"]) == 33  # the state still lists every call
    assert render_ledger(ledger) == THIRTY_LOOKUPS_TEXT
    assert count_text(THIRTY_LOOKUPS_TEXT) < 330  # 906 tokens with one line per call
    # Within a generous budget the request shows the same text; the CLI shows it too.
    assert render_ledger_within(ledger, 1_000) == THIRTY_LOOKUPS_TEXT


def test_the_summary_with_the_lean_record_still_verifies() -> None:
    ledger = thirty_lookups()
    sections = {
        "session_intent": "Look up the user's orders and refund A-1030.",
        "summary": "Thirty orders were looked up and all lookups succeeded. The refund went "
        "through; the card charge failed.",
        "artifacts": "A-1030",
        "next_steps": "Wait for the user.",
    }
    summary = {"schema_version": SUMMARY_SCHEMA_VERSION, **sections, "ledger": ledger}
    assert summary_problems(summary, Settings()) == []
    # A summary that calls the read-only lookups failed, or the charge a success, is caught
    # although neither has a line of its own any more.
    wrong = {**summary, "summary": "The lookup_order calls failed. The charge_card succeeded."}
    problems = summary_problems(wrong, Settings())
    assert len(problems) == 2
    assert "lookup_order (call look_1, " in problems[0] and "records it as succeeded" in problems[0]
    assert "charge_card (call charge_1) succeeded" in problems[1]
    view = render_summary(summary, 3, Settings().ledger_budget)
    assert view.endswith(f"{THIRTY_LOOKUPS_TEXT}\n</conversation_summary>")


def test_folded_line_follows_new_calls_of_the_same_tool() -> None:
    ledger = merge_ledgers(empty_ledger(), derive_ledger(lookups(1, 3)))
    assert render_ledger(ledger).splitlines()[1] == (
        "- [succeeded] lookup_order ×3 (read-only), turns 1–3, latest: order_id=A-1003"
    )
    ledger = merge_ledgers(ledger, derive_ledger(lookups(4, 9)))
    lines = render_ledger(ledger).splitlines()
    assert lines[1] == (
        "- [succeeded] lookup_order ×9 (read-only), turns 1–9, latest: order_id=A-1009"
    )
    assert sum("lookup_order" in line for line in lines) == 1
    # Bounding folds the oldest lookups into a count that keeps no turns: the line counts
    # them and says only the last turn.
    bounded = bound_ledger(ledger, max_tool_calls=4, max_identifiers=50)
    assert bounded["aggregated"] == {"lookup_order": 5}
    assert render_ledger(bounded).splitlines()[1] == (
        "- [succeeded] lookup_order ×9 (read-only), last in turn 9, latest: order_id=A-1009"
    )
    # Once every lookup is a count, the line keeps the count alone.
    counted = bound_ledger(bounded, max_tool_calls=0, max_identifiers=50)
    assert render_ledger(counted).splitlines()[1] == "- [succeeded] lookup_order ×9 (read-only)"
    # A single read-only success keeps its ordinary line, id included.
    single = merge_ledgers(empty_ledger(), derive_ledger(lookups(1, 1)))
    assert render_ledger(single).splitlines()[1] == (
        "- [succeeded] lookup_order(order_id=A-1001) id=look_1"
    )


def test_turns_of_calls_move_past_the_previous_record() -> None:
    first = merge_ledgers(empty_ledger(), derive_ledger(lookups(1, 2)))
    # The next slice starts with a call of the previous record's last turn.
    tail: list[BaseMessage] = [
        AIMessage("", tool_calls=[call("lookup_order", "late", order_id="A-1099")]),
        ToolMessage(content="ok", tool_call_id="late"),
        *lookups(3, 3),
    ]
    merged = merge_ledgers(first, derive_ledger(tail))
    assert [(e["id"], e.get("turn")) for e in merged["tool_calls"]] == [
        ("look_1", 1),
        ("look_2", 2),
        ("late", 2),
        ("look_3", 3),
    ]
    # A result folded after its call keeps the turn the call was made in.
    planned = merge_ledgers(
        empty_ledger(),
        derive_ledger(
            [
                HumanMessage("Charge it."),
                AIMessage("", tool_calls=[call("charge_card", "c1", amount="30.00")]),
            ]
        ),
    )
    later = derive_ledger(
        [HumanMessage("And?"), ToolMessage(content="ok", tool_call_id="c1", name="charge_card")]
    )
    assert merge_ledgers(planned, later)["tool_calls"][0]["turn"] == 1


def _entry(call_id: str, name: str, status: str, **fields: Any) -> ToolCallEntry:
    base: dict[str, Any] = {
        "id": call_id,
        "name": name,
        "args": {},
        "status": status,
        "error": None,
        "idempotency_key": None,
        "side_effect": False,
    }
    base.update(fields)
    return base  # type: ignore[return-value]


def test_only_read_only_successes_fold_and_an_unknown_kind_never_does() -> None:
    unknown_kind = _entry("u1", "sync_crm", "succeeded", args={"account": "ACC-1"})
    del unknown_kind["side_effect"]  # type: ignore[misc]  # a record that never said
    ledger = empty_ledger()
    ledger["tool_calls"] = [
        _entry("g1", "get_invoice", "succeeded", args={"invoice_id": "INV-1001"}),
        _entry("g2", "get_invoice", "failed", args={"invoice_id": "INV-1002"}, error="not found"),
        _entry("g3", "get_invoice", "succeeded", args={"invoice_id": "INV-1003"}),
        unknown_kind,
        {**unknown_kind, "id": "u2"},
        _entry("p1", "get_invoice", "planned", args={"invoice_id": "INV-1004"}),
        _entry("x1", "cancel_order", "unknown", side_effect=True, idempotency_key="k-9"),
        _entry("x2", "cancel_order", "unknown", side_effect=True, idempotency_key="k-10"),
    ]
    assert render_ledger(ledger).splitlines() == [
        "TOOL CALLS (recorded by code, authoritative):",
        "- [failed] get_invoice(invoice_id=INV-1002) id=g2 — error: not found",
        "- [succeeded] get_invoice ×2 (read-only), latest: invoice_id=INV-1003",
        "- [succeeded] sync_crm(account=ACC-1) id=u1",
        "- [succeeded] sync_crm(account=ACC-1) id=u2",
        "- [planned] get_invoice(invoice_id=INV-1004) id=p1",
        "- [unknown] cancel_order() id=x1 idempotency_key=k-9",
        "- [unknown] cancel_order() id=x2 idempotency_key=k-10",
    ]


def test_identifiers_shown_in_a_ledger_line_are_not_repeated() -> None:
    ledger = thirty_lookups()
    ledger["identifiers"] = [
        "A-1030",  # on the lookup line and the refund line
        "rf-1030",  # an idempotency key, on the refund line
        "kim@example.com",  # an e-mail argument
        "$40.00",  # in a constraint
        "A-1001",  # only an earlier lookup's argument: no line shows it any more
        "A-103",  # a prefix of a shown id is not shown
        "a-1030",  # nor is another case of it
        "$5.00",  # the charge line says amount=5.00, not $5.00
        "ch-77",
    ]
    text = render_ledger(ledger)
    assert text.splitlines()[-2:] == [
        f"IDENTIFIERS: A-1001, A-103, a-1030, $5.00, {LATEST_ORDERS}",
        "Older looked-up identifiers in the archive (read_history query=<id>): 26",
    ]
    for identifier in ledger["identifiers"]:
        assert shown_verbatim(identifier, text)  # every identifier is still in the record
        assert text.count(f" {identifier},") + text.count(f" {identifier}\n") <= 1
    assert not shown_verbatim("A-1001", "order A-10012 and a-1001")
    assert shown_verbatim("$40.00", "more than $40.00.")


def _round(n: int) -> list[BaseMessage]:
    """One compaction's slice: a user turn of lookups; round 0 also refunds and fails."""
    messages = lookups(3 * n + 1, 3 * n + 3)
    if n == 0:
        messages += side_effects()
    return messages


def test_side_effects_keys_and_failures_survive_twenty_compactions_with_folded_lookups() -> None:
    settings = Settings()
    ledger = empty_ledger()
    for n in range(20):
        merged = merge_ledgers(ledger, derive_ledger(_round(n)))
        ledger = json.loads(json.dumps(bound_ledger(merged, max_tool_calls=8, max_identifiers=40)))
        for text in (render_ledger(ledger), render_ledger_within(ledger, settings.ledger_budget)):
            assert REFUND_LINE in text
            assert CHARGE_LINE in text
            assert "- [succeeded] send_email(to=kim@example.com) id=email_1" in text
            assert "- Never refund more than $40.00." in text
            assert sum("lookup_order" in line for line in text.splitlines()) == 1
    text = render_ledger(ledger)
    # 60 lookups in 61 turns (round 0's refund turn has none); most are counts by now.
    assert ledger["aggregated"] == {"lookup_order": 55}
    assert (
        "- [succeeded] lookup_order ×60 (read-only), last in turn 61, latest: order_id=A-1060"
    ) in text
    assert "- Do not change the shipping address. (said 60 times, turns 1–61)" in text
    assert count_text(render_ledger_within(ledger, settings.ledger_budget)) <= (
        settings.ledger_budget
    )
    assert find_contradictions("The refund_order call failed.", ledger) != []


def test_a_tight_budget_counts_the_tool_line_it_leaves_out() -> None:
    ledger = thirty_lookups()
    small = render_ledger_within(ledger, 120)
    assert count_text(small) <= 120
    assert CHARGE_LINE in small and "- Never refund more than $40.00." in small
    assert "lookup_order ×30 (read-only)" not in small
    assert "Older successes not listed here (all succeeded): lookup_order ×30" in small
    # Identifiers no listed line shows come last, newest first, while they fit.
    assert small.splitlines()[-1] == "IDENTIFIERS: kim@example.com"
