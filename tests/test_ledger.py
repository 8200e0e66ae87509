"""The compaction ledger: derive, merge, bound, render and contradiction checks."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxgraph.nodes.compaction.ledger import (
    Ledger,
    ToolCallEntry,
    bound_ledger,
    derive_ledger,
    empty_ledger,
    find_contradictions,
    is_read_only,
    merge_ledgers,
    render_ledger,
    render_ledger_within,
)
from ctxgraph.state.tokens import count_text


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


def ok(call_id: str, content: str = "ok") -> ToolMessage:
    return ToolMessage(content=content, tool_call_id=call_id)


def err(call_id: str, content: str) -> ToolMessage:
    return ToolMessage(content=content, tool_call_id=call_id, status="error")


def calls_by_id(ledger: Ledger) -> dict[str, ToolCallEntry]:
    return {entry["id"]: entry for entry in ledger["tool_calls"]}


def statuses(ledger: Ledger) -> dict[str, str]:
    return {entry["id"]: entry["status"] for entry in ledger["tool_calls"]}


def entry(
    call_id: str,
    name: str,
    status: str,
    *,
    side_effect: bool = False,
    error: str | None = None,
    args: dict[str, str] | None = None,
) -> ToolCallEntry:
    return {
        "id": call_id,
        "name": name,
        "args": args or {},
        "status": status,  # type: ignore[typeddict-item]
        "error": error,
        "idempotency_key": None,
        "side_effect": side_effect,
    }


def ledger_of(*entries: ToolCallEntry, **fields: Any) -> Ledger:
    ledger = empty_ledger()
    ledger["tool_calls"] = list(entries)
    ledger.update(fields)  # type: ignore[typeddict-item]
    return ledger


def texts(ledger: Ledger) -> list[str]:
    """The constraints' wordings, oldest said first."""
    return [constraint["text"] for constraint in ledger["constraints"]]


# --- tool-call states -------------------------------------------------------------------


def test_statuses_come_from_tool_results() -> None:
    messages: list[BaseMessage] = [
        HumanMessage("Refund order A-1001."),
        AIMessage(
            "",
            tool_calls=[
                call("lookup_order", "c_ok", order_id="A-1001"),
                call("charge_card", "c_timeout", amount="30.00"),
                call("refund_payment", "c_fail", order_id="A-1001"),
                call("send_email", "c_cancel", to="ops@example.com"),
                call("create_ticket", "c_deadline"),
                call("update_crm", "c_zh_timeout"),
                call("delete_draft", "c_zh_cancel"),
                call("notify_slack", "c_missing"),
            ],
        ),
        ok("c_ok", '{"order": "A-1001", "status": "paid"}'),
        err("c_timeout", "Error: TimeoutError('upstream timed out after 30s')\n Please fix."),
        err("c_fail", "Error: card declined\nTraceback (most recent call last): ..."),
        err("c_cancel", "Error: operation was cancelled by the user"),
        err("c_deadline", "rpc error: code = DEADLINE_EXCEEDED"),
        err("c_zh_timeout", "错误：请求超时"),
        err("c_zh_cancel", "操作已取消"),
        AIMessage("Done for now."),
    ]
    ledger = derive_ledger(messages)
    assert statuses(ledger) == {
        "c_ok": "succeeded",
        "c_timeout": "unknown",
        "c_fail": "failed",
        "c_cancel": "cancelled",
        "c_deadline": "unknown",
        "c_zh_timeout": "unknown",
        "c_zh_cancel": "cancelled",
        "c_missing": "unknown",
    }
    entries = calls_by_id(ledger)
    assert entries["c_ok"]["error"] is None
    assert entries["c_timeout"]["error"] == "Error: TimeoutError('upstream timed out after 30s')"
    assert entries["c_fail"]["error"] == "Error: card declined"
    assert entries["c_missing"]["error"] is None
    assert entries["c_ok"]["args"] == {"order_id": "A-1001"}
    assert entries["c_ok"]["side_effect"] is False
    assert entries["c_timeout"]["side_effect"] is True


def test_a_missing_result_is_unknown_never_failed() -> None:
    messages: list[BaseMessage] = [
        AIMessage("", tool_calls=[call("charge_card", "c1", amount="5")]),
        HumanMessage("Any news?"),
    ]
    assert statuses(derive_ledger(messages)) == {"c1": "unknown"}
    # The synthetic result the partitioner writes for an unanswered call is "unknown" too.
    synthetic = err(
        "c2",
        "No result was recorded for this tool call, so its outcome is unknown. "
        "Do not assume it succeeded or failed; check before repeating it.",
    )
    messages = [AIMessage("", tool_calls=[call("charge_card", "c2")]), synthetic]
    assert statuses(derive_ledger(messages)) == {"c2": "unknown"}


def test_a_call_in_the_last_message_is_planned() -> None:
    messages: list[BaseMessage] = [
        HumanMessage("Charge the card."),
        AIMessage("", tool_calls=[call("charge_card", "c1"), call("get_balance", "c2")]),
    ]
    assert statuses(derive_ledger(messages)) == {"c1": "planned", "c2": "planned"}


def test_parallel_tool_calls_in_one_message() -> None:
    messages: list[BaseMessage] = [
        AIMessage(
            "",
            tool_calls=[
                call("get_weather", "p1", city="Paris"),
                call("book_table", "p2", time="19:30"),
                call("send_sms", "p3", to="10086"),
            ],
        ),
        # Results arrive in another order than the calls were made.
        err("p3", "Error: request timed out"),
        ok("p1", "sunny"),
        err("p2", "Error: restaurant full"),
    ]
    ledger = derive_ledger(messages)
    assert [e["id"] for e in ledger["tool_calls"]] == ["p1", "p2", "p3"]
    assert statuses(ledger) == {"p1": "succeeded", "p2": "failed", "p3": "unknown"}
    assert [e["side_effect"] for e in ledger["tool_calls"]] == [False, True, True]


def test_entry_fields_are_compact() -> None:
    long_text = "word " * 40
    args: dict[str, Any] = {
        "amount": 30.5,
        "note": long_text,
        "meta": {"a": [1, 2], "b": "x"},
        "flag": True,
        "k5": "v5",
        "k6": "v6",
        "k7": "v7",
        "Idempotency-Key": "idem-7",
    }
    messages: list[BaseMessage] = [
        AIMessage("", tool_calls=[call("charge_card", "c1", **args)]),
        err("c1", "E" * 300 + "\nsecond line"),
    ]
    entry_ = derive_ledger(messages)["tool_calls"][0]
    assert list(entry_["args"]) == ["amount", "note", "meta", "flag", "k5", "k6"]
    assert entry_["args"]["amount"] == "30.5"
    assert entry_["args"]["meta"] == '{"a":[1,2],"b":"x"}'
    assert entry_["args"]["flag"] == "true"
    assert len(entry_["args"]["note"]) == 80
    assert entry_["args"]["note"].endswith("…")
    assert entry_["args"]["note"].startswith("word word")
    assert "  " not in entry_["args"]["note"]
    assert entry_["idempotency_key"] == "idem-7"  # found beyond the first six keys
    assert entry_["error"] is not None
    assert len(entry_["error"]) == 120
    assert entry_["error"].endswith("…")
    assert entry_["status"] == "failed"


@pytest.mark.parametrize(
    ("args", "key"),
    [
        ({"request_id": "r-1"}, "r-1"),
        ({"idempotency_key": "k-1"}, "k-1"),
        ({"stripe_idempotency_token": "tok-9"}, "tok-9"),
        ({"order_id": "A-1001"}, None),
        ({"idempotency_key": None}, None),
    ],
)
def test_idempotency_key(args: dict[str, Any], key: str | None) -> None:
    messages: list[BaseMessage] = [AIMessage("", tool_calls=[call("charge", "c1", **args)])]
    assert derive_ledger(messages)["tool_calls"][0]["idempotency_key"] == key


@pytest.mark.parametrize(
    ("name", "read_only"),
    [
        ("get_order", True),
        ("getOrder", True),
        ("list_files", True),
        ("read_file", True),
        ("search", True),
        ("lookup_order", True),
        ("look_up_customer", True),
        ("fetch_url", True),
        ("query_db", True),
        ("find_user", True),
        ("view_invoice", True),
        ("show_cart", True),
        ("describe_table", True),
        ("count_rows", True),
        ("check_status", True),
        ("inspect_logs", True),
        ("calculator", True),
        ("Search_Web", True),
        ("send_email", False),
        ("charge_card", False),
        ("delete_file", False),
        ("update_order", False),
        ("checkout", False),
        ("showcase_item", False),
        ("gettysburg", False),
    ],
)
def test_is_read_only_by_name(name: str, read_only: bool) -> None:
    assert is_read_only(name) is read_only


def test_is_read_only_explicit_set_and_side_effect_flag() -> None:
    assert is_read_only("weather", frozenset({"weather"}))
    assert not is_read_only("weather")
    messages: list[BaseMessage] = [
        AIMessage("", tool_calls=[call("weather", "w1"), call("translate", "t1")]),
        ok("w1"),
        ok("t1"),
    ]
    ledger = derive_ledger(messages, read_only_tools=frozenset({"weather"}))
    assert {e["id"]: e["side_effect"] for e in ledger["tool_calls"]} == {"w1": False, "t1": True}


# --- constraints --------------------------------------------------------------------------


def test_english_constraints_verbatim_from_real_user_messages_only() -> None:
    messages: list[BaseMessage] = [
        HumanMessage(
            "Hi there. Do not email the customer before Friday. The order is A-1001.\n"
            "You must use the staging database! Never touch /srv/prod/db.sqlite? "
            "Refund at most $30.00 and keep the reply under 100 words. "
            "Make sure the invoice is attached; I like short answers.\n"
            "Don't retry without asking. Only use EUR. It was a long day."
        ),
        HumanMessage("Always reply in English.", additional_kwargs={"origin": "memory"}),
        AIMessage("I must not forget the order. We never do that."),
        HumanMessage("Do not email the customer before Friday."),
    ]
    ledger = derive_ledger(messages)
    # Ordered by the turn each was last said: the repeated one moves to the end. A
    # sentence that ends with a question mark is a question, not a constraint.
    assert texts(ledger) == [
        "You must use the staging database!",
        "Refund at most $30.00 and keep the reply under 100 words.",
        "Make sure the invoice is attached",  # the marked clause, not the preference after it
        "Don't retry without asking.",
        "Only use EUR.",
        "Do not email the customer before Friday.",
    ]
    assert ledger["constraints"][0] == {
        "text": "You must use the staging database!",
        "count": 1,
        "last_turn": 1,
        "first_turn": 1,
    }
    assert ledger["constraints"][-1] == {
        "text": "Do not email the customer before Friday.",
        "count": 2,
        "last_turn": 2,
        "first_turn": 1,
    }
    assert ledger["user_turns"] == 2  # the injected memory message is not a user turn


def test_chinese_constraints() -> None:
    messages: list[BaseMessage] = [
        HumanMessage(
            "你好！不要在周五之前给客户发邮件。订单号是A-1001。必须使用测试环境；"
            "我特别喜欢简短的回答。别重复扣款！退款金额仅限¥1,200。这不仅是问题。"
            "请勿删除/srv/app/config.yaml\n务必保留发票"
        ),
        HumanMessage("禁止访问生产库。", additional_kwargs={"origin": "summary"}),
    ]
    assert texts(derive_ledger(messages)) == [
        "不要在周五之前给客户发邮件。",
        "必须使用测试环境；",
        "别重复扣款！",
        "退款金额仅限¥1,200。",
        "请勿删除/srv/app/config.yaml",
        "务必保留发票",
    ]


# --- identifiers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Order A-1001 and ORD-2026-0042, invoice INV12345.",
            ["A-1001", "ORD-2026-0042", "INV12345"],
        ),
        ("Call 10086 or 4008123123.", ["10086", "4008123123"]),
        ("id 123e4567-e89b-12d3-a456-426614174000!", ["123e4567-e89b-12d3-a456-426614174000"]),
        ("commit a1b2c3d and sha 9f8e7d6c5b4a3f2e1d0c.", ["a1b2c3d", "9f8e7d6c5b4a3f2e1d0c"]),
        (
            "Edit /srv/app/config.yaml, ./src/main.py and src/app/models.py.",
            ["/srv/app/config.yaml", "./src/main.py", "src/app/models.py"],
        ),
        (
            "See https://example.com/orders?id=7, then mail ops@example.com.",
            [
                "https://example.com/orders?id=7",
                "ops@example.com",
            ],
        ),
        (
            "Costs $30.00, ¥1,200, 30 EUR, USD 12.5 or €9.",
            ["$30.00", "¥1,200", "30 EUR", "USD 12.5", "€9"],
        ),
        (
            "Due 2026-09-02, 2026/09/02, 09/02/2026 or 2026年9月2日 at 14:30.",
            ["2026-09-02", "2026/09/02", "09/02/2026", "2026年9月2日", "14:30"],
        ),
        ("订单A-1001的配置在/srv/app/config.yaml里。", ["A-1001", "/srv/app/config.yaml"]),
    ],
)
def test_identifiers_of_every_kind(text: str, expected: list[str]) -> None:
    assert derive_ledger([HumanMessage(text)])["identifiers"] == expected


def test_non_identifiers_are_not_picked_up() -> None:
    text = (
        "I have 3 cats and 42 dogs, version 1.2.3, pi is 3.14159, COVID-19, GPT-4, x86_64, "
        "UTF-8, and/or A/B tests, deadbeef, a ratio of 16:9, 1,200 people, hello world."
    )
    assert derive_ledger([HumanMessage(text)])["identifiers"] == []
    # Dates need a real month and day.
    found = derive_ledger([HumanMessage("Scores 45/67/2026 and 2026-13-45.")])["identifiers"]
    assert not [value for value in found if "/" in value or "-" in value]


def test_identifiers_from_tool_args_and_side_effect_results_in_first_seen_order() -> None:
    messages: list[BaseMessage] = [
        HumanMessage("Look up A-1001."),
        AIMessage(
            "",
            tool_calls=[
                call("lookup_order", "c1", order_id="A-1001", phone=10086, path=["/srv/a/b.json"])
            ],
        ),
        # A read-only result can be read again and is archived: not copied to the ledger.
        ok("c1", "Order A-1001 ships on 2026-09-02 to ops@example.com."),
        AIMessage("It ships on 2026-09-02, total $30.00."),
        AIMessage("", tool_calls=[call("create_ticket", "c2", order_id="A-1001")]),
        ok("c2", "Created ticket TCK-5512 for support@example.com."),
    ]
    ledger = derive_ledger(messages)
    assert ledger["identifiers"] == [
        "A-1001",  # a ticket was created for it: listed
        "2026-09-02",
        "$30.00",
        "TCK-5512",
        "support@example.com",
    ]
    # Only the read-only lookup's arguments name these: indexed, first seen first.
    assert ledger.get("looked_up") == ["10086", "/srv/a/b.json"]


def test_ledger_is_json_serialisable() -> None:
    messages: list[BaseMessage] = [
        HumanMessage("Never charge twice. Order A-1001."),
        AIMessage("", tool_calls=[call("charge_card", "c1", amount=30.0, meta={"x": [1]})]),
        err("c1", "timed out"),
    ]
    ledger = derive_ledger(messages)
    assert json.loads(json.dumps(ledger)) == ledger


# --- merge --------------------------------------------------------------------------------


def test_merge_keeps_first_seen_order_and_never_downgrades_a_final_state() -> None:
    previous = ledger_of(
        entry("c1", "charge_card", "succeeded", side_effect=True),
        entry("c2", "refund", "failed", side_effect=True, error="declined"),
        entry("c3", "cancel_order", "cancelled", side_effect=True),
        entry("c4", "send_email", "planned", side_effect=True),
        entry("c5", "get_order", "unknown"),
        aggregated={"get_order": 2},
        constraints=["Never charge twice."],
        identifiers=["A-1001", "B-2002"],
    )
    new = ledger_of(
        entry("c6", "get_order", "succeeded"),
        entry("c1", "charge_card", "unknown", side_effect=True),
        entry("c2", "refund", "planned", side_effect=True),
        entry("c3", "cancel_order", "unknown", side_effect=True),
        entry("c4", "send_email", "succeeded", side_effect=True),
        entry("c5", "get_order", "failed", error="boom"),
        aggregated={"get_order": 3, "list_files": 1},
        constraints=["Only use EUR.", "Never charge twice."],
        identifiers=["B-2002", "C-3003"],
        user_turns=3,
    )
    merged = merge_ledgers(previous, new)
    assert [e["id"] for e in merged["tool_calls"]] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert statuses(merged) == {
        "c1": "succeeded",
        "c2": "failed",
        "c3": "cancelled",
        "c4": "succeeded",
        "c5": "failed",
        "c6": "succeeded",
    }
    assert calls_by_id(merged)["c2"]["error"] == "declined"
    assert calls_by_id(merged)["c5"]["error"] == "boom"
    assert merged["aggregated"] == {"get_order": 5, "list_files": 1}
    # Older records store constraints as plain strings; both shapes merge into entries.
    assert merged["constraints"] == [
        {"text": "Only use EUR.", "count": 1, "last_turn": 0, "first_turn": 0},
        {"text": "Never charge twice.", "count": 2, "last_turn": 0, "first_turn": 0},
    ]
    assert merged["user_turns"] == 3
    assert merged["identifiers"] == ["A-1001", "B-2002", "C-3003"]
    assert previous["aggregated"] == {"get_order": 2}  # inputs are not changed


def test_a_later_final_state_replaces_an_earlier_one() -> None:
    merged = merge_ledgers(
        ledger_of(entry("c1", "charge_card", "failed", side_effect=True, error="declined")),
        ledger_of(entry("c1", "charge_card", "succeeded", side_effect=True)),
    )
    assert statuses(merged) == {"c1": "succeeded"}
    assert merged["tool_calls"][0]["error"] is None


def test_result_folded_after_its_call_completes_the_entry() -> None:
    first = derive_ledger(
        [
            HumanMessage("Charge it."),
            AIMessage(
                "", tool_calls=[call("charge_card", "c1", amount="30.00", idempotency_key="k-1")]
            ),
        ]
    )
    assert statuses(first) == {"c1": "planned"}
    second = derive_ledger(
        [ToolMessage(content="charged", tool_call_id="c1", name="charge_card"), AIMessage("ok")]
    )
    merged = merge_ledgers(first, second)
    assert merged["tool_calls"] == [
        {
            "id": "c1",
            "name": "charge_card",
            "args": {"amount": "30.00", "idempotency_key": "k-1"},
            "status": "succeeded",
            "error": None,
            "idempotency_key": "k-1",
            "side_effect": True,
            "turn": 1,
        }
    ]
    # A result without a tool name still upgrades the call and keeps what the call said.
    nameless = derive_ledger([err("c1", "Error: card declined")])
    assert nameless["tool_calls"][0]["side_effect"] is True
    merged = merge_ledgers(first, nameless)
    assert merged["tool_calls"][0]["name"] == "charge_card"
    assert merged["tool_calls"][0]["status"] == "failed"
    assert merged["tool_calls"][0]["args"] == {"amount": "30.00", "idempotency_key": "k-1"}


# --- bound --------------------------------------------------------------------------------


def test_bound_folds_oldest_read_only_successes_first() -> None:
    ledger = ledger_of(
        entry("r1", "lookup_order", "succeeded"),
        entry("s1", "send_email", "succeeded", side_effect=True),
        entry("r2", "search_docs", "succeeded"),
        entry("r3", "lookup_order", "succeeded"),
        entry("r4", "lookup_order", "succeeded"),
        aggregated={"lookup_order": 7},
    )
    bounded = bound_ledger(ledger, max_tool_calls=3, max_identifiers=10)
    assert [e["id"] for e in bounded["tool_calls"]] == ["s1", "r3", "r4"]
    assert bounded["aggregated"] == {"lookup_order": 8, "search_docs": 1}
    # Within the bound nothing is folded.
    same = bound_ledger(ledger, max_tool_calls=5, max_identifiers=10)
    assert same["tool_calls"] == ledger["tool_calls"]
    assert same["aggregated"] == {"lookup_order": 7}
    assert len(ledger["tool_calls"]) == 5  # input not changed


def test_bound_folds_side_effects_and_non_success_states_last() -> None:
    keep = [
        entry("s1", "send_email", "succeeded", side_effect=True),
        entry("f1", "lookup_order", "failed", error="404"),
        entry("u1", "lookup_order", "unknown"),
        entry("c1", "search_docs", "cancelled"),
        entry("p1", "get_balance", "planned"),
        entry("u2", "charge_card", "unknown", side_effect=True),
    ]
    ledger = ledger_of(
        keep[0],
        entry("r1", "lookup_order", "succeeded"),
        *keep[1:],
        entry("r2", "lookup_order", "succeeded"),
        identifiers=[f"ID-{n:04d}" for n in range(20)],
    )
    # Within six entries, only the read-only successes go.
    bounded = bound_ledger(ledger, max_tool_calls=6, max_identifiers=5)
    assert bounded["tool_calls"] == keep
    assert bounded["aggregated"] == {"lookup_order": 2}
    assert bounded["folded_calls"] == {}
    assert bounded["identifiers"] == ["ID-0015", "ID-0016", "ID-0017", "ID-0018", "ID-0019"]
    # Tighter: read-only non-successes next (oldest first), then side-effect successes.
    tight = bound_ledger(ledger, max_tool_calls=2, max_identifiers=5)
    assert [e["id"] for e in tight["tool_calls"]] == ["s1", "u2"]
    assert tight["folded_calls"] == {
        "lookup_order": {"failed": 1, "unknown": 1},
        "search_docs": {"cancelled": 1},
        "get_balance": {"planned": 1},
    }
    # A side effect of unknown outcome is the very last to go.
    assert [
        e["id"] for e in bound_ledger(ledger, max_tool_calls=1, max_identifiers=5)["tool_calls"]
    ] == ["u2"]
    assert bound_ledger(ledger, max_tool_calls=2, max_identifiers=0)["identifiers"] == []
    with pytest.raises(ValueError, match="negative"):
        bound_ledger(ledger, max_tool_calls=-1, max_identifiers=5)


# --- render -------------------------------------------------------------------------------


def test_render_ledger() -> None:
    assert render_ledger(empty_ledger()) == ""
    ledger = ledger_of(
        entry("call_1", "lookup_order", "succeeded", args={"order_id": "A-1001"}),
        {
            **entry("call_2", "charge_card", "unknown", side_effect=True, error="timed out"),
            "args": {"amount": "30.00", "idempotency_key": "k-1"},
            "idempotency_key": "k-1",
        },
        {**entry("call_3", "refund", "failed", side_effect=True), "idempotency_key": "r-9"},
        aggregated={"lookup_order": 12},
        constraints=["Do not email the customer before Friday."],
        identifiers=["A-1001", "/srv/app/config.yaml", "2026-09-02", "$30.00"],
    )
    assert render_ledger(ledger) == (
        "TOOL CALLS (recorded by code, authoritative):\n"
        "- [succeeded] lookup_order ×13 (read-only), latest: order_id=A-1001\n"
        "- [unknown] charge_card(amount=30.00, idempotency_key=k-1) id=call_2 — error: timed out\n"
        "- [failed] refund() id=call_3 idempotency_key=r-9\n"
        "USER CONSTRAINTS (verbatim):\n"
        "- Do not email the customer before Friday.\n"
        "IDENTIFIERS: /srv/app/config.yaml, 2026-09-02, $30.00"
    )
    only_constraints = ledger_of(constraints=["Only use EUR."])
    assert render_ledger(only_constraints) == "USER CONSTRAINTS (verbatim):\n- Only use EUR."


# --- contradictions -----------------------------------------------------------------------


@pytest.fixture
def checked() -> Ledger:
    return ledger_of(
        entry("call_1", "lookup_order", "succeeded"),
        entry("call_2", "charge_card", "unknown", side_effect=True, error="timed out"),
        entry("call_3", "refund_payment", "failed", side_effect=True),
        entry("call_4", "send_email", "cancelled", side_effect=True),
        entry("call_5", "create_ticket", "planned", side_effect=True),
        entry("call_6", "get_invoice", "succeeded"),
        entry("call_7", "get_invoice", "failed"),
    )


@pytest.mark.parametrize(
    ("summary", "call_id", "status"),
    [
        ("The card was charged via charge_card, which succeeded.", "call_2", "unknown"),
        ("Payment call_2 completed.", "call_2", "unknown"),
        ("The refund went through (refund_payment).", "call_3", "failed"),
        ("send_email was sent successfully", "call_4", "cancelled"),
        ("create_ticket is done", "call_5", "planned"),
        ("lookup_order failed with an error.", "call_1", "succeeded"),
        ("charge_card 已成功扣款。", "call_2", "unknown"),
        ("退款refund_payment成功", "call_3", "failed"),
        ("lookup_order 调用失败", "call_1", "succeeded"),
        ("Both refund_payment and charge_card succeeded.", "call_3", "failed"),
        ("lookup_order and get_invoice call_7 all went through.", "call_7", "failed"),
        ("Successfully retried get_invoice (call_7).", "call_7", "failed"),
        ("If in doubt, note that charge_card completed.", "call_2", "unknown"),
    ],
)
def test_contradictions_are_found(checked: Ledger, summary: str, call_id: str, status: str) -> None:
    problems = find_contradictions(
        f"SUMMARY\nWe looked things up. {summary} Next we wait.", checked
    )
    matching = [p for p in problems if f"call {call_id})" in p]
    assert len(matching) == 1, problems
    assert f"records it as {status}" in matching[0]
    assert summary.strip() in matching[0]


@pytest.mark.parametrize(
    "summary",
    [
        "lookup_order succeeded and returned A-1001.",
        "charge_card (call_2) timed out; its outcome is unknown.",
        "charge_card has not completed, so do not retry it blindly.",
        "It is unclear whether charge_card went through.",
        "charge_card may have succeeded.",
        "The charge did not succeed: charge_card timed out.",
        "refund_payment failed with an error.",
        "refund_payment was not successful.",
        "charge_card 未成功，结果未知。",
        "charge_card 是否成功尚不清楚。",
        "lookup_order ran without errors.",
        "lookup_order 没有失败。",
        "lookup_order succeeded, but refund_payment failed.",
        "refund_payment failed while lookup_order succeeded.",
        "get_invoice succeeded once.",  # mixed states for this name: not checkable by name
        "get_invoice call_6 succeeded and call_7 failed.",
        "create_ticket is planned and not done yet.",
        "send_email was cancelled.",
        "The ledger lists call_1 and call_2 in full.",
        "call_22 completed and recharge_card_v2 succeeded.",  # other calls, not call_2
        "lookup_order succeeded; confirm charge_card completed before emailing.",
        "If refund_payment and charge_card went through, email the customer.",
        "Once create_ticket is done, close the chat.",
        "确认charge_card是否成功后再发邮件。",
        "如果charge_card成功，就通知客户。",
    ],
)
def test_consistent_summaries_have_no_contradictions(checked: Ledger, summary: str) -> None:
    assert find_contradictions(summary, checked) == []


def test_contradiction_description_names_id_tool_status_and_sentence(checked: Ledger) -> None:
    summary = "SUMMARY\nWe refunded the order. The charge (call_2) was completed.\nAll good."
    assert find_contradictions(summary, checked) == [
        "the summary says charge_card (call call_2) succeeded, but the ledger records it as "
        'unknown: "The charge (call_2) was completed."'
    ]


def test_a_call_is_reported_once_per_sentence(checked: Ledger) -> None:
    problems = find_contradictions("call_2 completed; charge_card call_2 completed too.", checked)
    assert len(problems) == 1


def test_name_mentions_cover_every_entry_of_a_uniform_name() -> None:
    ledger = ledger_of(
        entry("a1", "charge_card", "unknown", side_effect=True),
        entry("a2", "charge_card", "unknown", side_effect=True),
        entry("r1", "lookup_order", "failed"),
        aggregated={"lookup_order": 3},
    )
    problems = find_contradictions("charge_card succeeded. lookup_order succeeded.", ledger)
    # lookup_order also has folded successes, so its name alone is not a checkable claim.
    assert len(problems) == 1
    assert "charge_card (call a1, a2) succeeded" in problems[0]
    # Named together with one of its ids, the id alone stands for the call.
    problems = find_contradictions("Successfully charged with charge_card (a2).", ledger)
    assert len(problems) == 1
    assert "charge_card (call a2) succeeded" in problems[0]


# --- many compactions ----------------------------------------------------------------------


def _round_messages(n: int) -> list[BaseMessage]:
    """One folded slice: the previous round's ticket result, a user turn, six calls, a plan."""
    messages: list[BaseMessage] = []
    if n > 0:
        prev = n - 1
        messages.append(
            ToolMessage(
                content="ticket created", tool_call_id=f"r{prev}_ticket", name="create_ticket"
            )
        )
    messages += [
        HumanMessage(
            f"Handle order ORD-2026-{n:04d} now. Never refund more than ${n + 10}.00 in round {n}."
        ),
        HumanMessage(f"Always mention PREF-{n:04d}.", additional_kwargs={"origin": "memory"}),
        AIMessage(
            "",
            tool_calls=[
                call("lookup_order", f"r{n}_look_a", order_id=f"ORD-2026-{n:04d}"),
                call("lookup_order", f"r{n}_look_b", order_id=f"ORD-2026-{n:04d}"),
                call("search_docs", f"r{n}_search", query="refund policy"),
                call("send_email", f"r{n}_email", to=f"user{n}@example.com"),
                call("get_invoice", f"r{n}_invoice", invoice_id=f"INV{n + 10000}"),
                call("charge_card", f"r{n}_charge", amount="10.00", idempotency_key=f"key-{n}"),
            ],
        ),
        ok(f"r{n}_look_a", f"order ORD-2026-{n:04d} is paid"),
        ok(f"r{n}_look_b", "paid"),
        ok(f"r{n}_search", f"see /srv/docs/refunds_{n}.md"),
        ok(f"r{n}_email", "sent"),
        err(f"r{n}_invoice", "Error: invoice not found"),
        err(f"r{n}_charge", "Error: gateway timed out"),
        AIMessage("", tool_calls=[call("create_ticket", f"r{n}_ticket", title=f"round {n}")]),
    ]
    return messages


def test_twenty_compactions_keep_every_fact_that_matters() -> None:
    ledger = empty_ledger()
    for n in range(20):
        folded = derive_ledger(_round_messages(n))
        ledger = bound_ledger(merge_ledgers(ledger, folded), max_tool_calls=80, max_identifiers=500)
        ledger = json.loads(json.dumps(ledger))  # stored in, and read back from, a checkpoint
        assert len(ledger["tool_calls"]) >= 4 * (n + 1)

    entries = calls_by_id(ledger)
    for n in range(20):
        assert entries[f"r{n}_email"]["status"] == "succeeded"
        assert entries[f"r{n}_email"]["side_effect"] is True
        assert entries[f"r{n}_invoice"]["status"] == "failed"
        assert entries[f"r{n}_invoice"]["error"] == "Error: invoice not found"
        assert entries[f"r{n}_charge"]["status"] == "unknown"
        assert entries[f"r{n}_charge"]["idempotency_key"] == f"key-{n}"
        ticket = entries[f"r{n}_ticket"]
        assert ticket["status"] == ("planned" if n == 19 else "succeeded")
        assert ticket["args"] == {"title": f"round {n}"}
        assert ticket["side_effect"] is True
    # Every read-only success was folded into counts; nothing else was.
    read_only = {"lookup_order", "search_docs"}
    assert not [e for e in ledger["tool_calls"] if e["name"] in read_only]
    assert ledger["aggregated"] == {"lookup_order": 40, "search_docs": 20}
    assert len(ledger["tool_calls"]) == 4 * 20
    assert [e["id"] for e in ledger["tool_calls"]][:4] == [
        "r0_email",
        "r0_invoice",
        "r0_charge",
        "r0_ticket",
    ]

    said = {constraint["text"]: constraint for constraint in ledger["constraints"]}
    for n in range(20):
        assert said[f"Never refund more than ${n + 10}.00 in round {n}."]["last_turn"] == n + 1
        for identifier in (f"${n + 10}.00", f"user{n}@example.com", f"INV{n + 10000}"):
            assert identifier in ledger["identifiers"]
        # The order was only looked up: it is in the index (the archive finds its turns;
        # tests/test_identifier_index.py looks it up there), not in the list.
        assert f"ORD-2026-{n:04d}" in ledger.get("looked_up", [])
        assert f"ORD-2026-{n:04d}" not in ledger["identifiers"]
        # Only seen in a read-only search result, which stays readable in the archive.
        assert f"/srv/docs/refunds_{n}.md" not in ledger["identifiers"]
        assert f"Always mention PREF-{n:04d}." not in said
    assert len(ledger["constraints"]) == 20  # "Handle order ... now." has no marker
    assert len(ledger["identifiers"]) == len(set(ledger["identifiers"]))

    text = render_ledger(ledger)
    assert "- [succeeded] lookup_order ×40 (read-only)\n" in text
    assert "- [succeeded] search_docs ×20 (read-only)\n" in text
    assert "- [unknown] charge_card(amount=10.00, idempotency_key=key-19) id=r19_charge" in text

    # Under a tighter bound, only the newest side effects of unknown outcome stay listed;
    # every other call is counted per tool and status, and no call goes uncounted.
    tight = bound_ledger(ledger, max_tool_calls=10, max_identifiers=500)
    assert [e["id"] for e in tight["tool_calls"]] == [
        *(f"r{n}_charge" for n in range(11, 20)),
        "r19_ticket",
    ]
    assert tight["folded_calls"] == {
        "send_email": {"succeeded": 20},
        "get_invoice": {"failed": 20},
        "charge_card": {"unknown": 11},
        "create_ticket": {"succeeded": 19},
    }
    folded_total = sum(n for counts in tight["folded_calls"].values() for n in counts.values())
    assert len(tight["tool_calls"]) + sum(tight["aggregated"].values()) + folded_total == 7 * 20
    assert "Older calls in the archive (read_history): send_email succeeded ×20" in render_ledger(
        tight
    )


def test_summary_check_after_many_compactions() -> None:
    ledger = empty_ledger()
    for n in range(3):
        ledger = bound_ledger(
            merge_ledgers(ledger, derive_ledger(_round_messages(n))),
            max_tool_calls=10,
            max_identifiers=500,
        )
    good = "Orders were looked up. charge_card timed out each time (unknown). Emails were sent."
    assert find_contradictions(good, ledger) == []
    bad = "The card payment r1_charge succeeded."
    assert len(find_contradictions(bad, ledger)) == 1
    assert copy.deepcopy(ledger) == ledger


def _busy_ledger(rounds: int) -> Ledger:
    messages: list[BaseMessage] = [HumanMessage("Never email twice.")]
    for n in range(rounds):
        messages += [
            AIMessage("", tool_calls=[call("send_email", f"e{n}", to=f"user{n}@example.com")]),
            ok(f"e{n}", "sent"),
            AIMessage("", tool_calls=[call("lookup_order", f"l{n}", order_id=f"ORD-{n:05d}")]),
            ok(f"l{n}"),
        ]
    messages += [
        AIMessage("", tool_calls=[call("charge_card", "c1", amount="30.00")]),
        err("c1", "gateway timed out"),
    ]
    return derive_ledger(messages)


def test_rendering_within_a_budget_keeps_what_must_never_be_lost() -> None:
    ledger = _busy_ledger(40)
    full = render_ledger(ledger)
    small = render_ledger_within(ledger, 200)
    # Far over the budget (less than before looked-up ids moved to the archive index).
    assert count_text(full) > 3 * 200
    assert count_text(small) <= 200
    assert "- [unknown] charge_card(amount=30.00) id=c1 — error: gateway timed out" in small
    assert "- Never email twice." in small
    # Side-effect successes take the room first, newest first; the rest are counted.
    assert "id=e39" in small
    assert "lookup_order(" not in small
    unlisted = re.search(r"Older successes not listed here \(all succeeded\): (.*)", small)
    assert unlisted is not None
    counts = dict(part.split(" ×") for part in unlisted.group(1).split(", "))
    assert int(counts["send_email"]) + small.count("send_email(") == 40
    assert counts["lookup_order"] == "40"
    # A generous budget lists everything, exactly as the full rendering does.
    assert render_ledger_within(ledger, 100_000) == full
