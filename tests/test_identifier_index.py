"""The identifier index: ids only read-only lookups touched leave the list for the archive.

The record lists the identifiers of side effects, failures, unknown and planned calls,
constraints and decisions, and the latest few only looked up; the others are counted in
one line, and ``read_history`` with the id finds the archived turns that mention them.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxgraph.nodes.compaction.ledger import (
    bound_ledger,
    derive_ledger,
    empty_ledger,
    merge_ledgers,
    read_ledger,
    render_ledger,
    render_ledger_within,
)
from ctxgraph.nodes.compaction.ledger.identifiers import LATEST_LOOKED_UP, archived_line
from ctxgraph.state.scripted_model import ScriptedChatModel
from tests.support.scripted import demo_summarizer
from tests.test_compaction import (
    CTX,
    ORDERS,
    Session,
    latest_user,
    make_session,
    order_agent,
    transcript_of,
)


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


def lookup(n: int) -> list[BaseMessage]:
    """A user turn that looks up order ``ORD-{n}`` and succeeds."""
    return [
        HumanMessage(f"Where is order ORD-{n:03d}?"),
        AIMessage("", tool_calls=[call("lookup_order", f"look_{n}", order_id=f"ORD-{n:03d}")]),
        ToolMessage(content=f"order ORD-{n:03d} shipped", tool_call_id=f"look_{n}"),
    ]


def lookups(count: int) -> list[BaseMessage]:
    return [message for n in range(1, count + 1) for message in lookup(n)]


def test_looked_up_ids_leave_the_list_and_the_latest_stay_listed() -> None:
    ledger = derive_ledger(lookups(8))
    assert ledger["identifiers"] == []
    assert ledger.get("looked_up") == [f"ORD-{n:03d}" for n in range(1, 9)]
    text = render_ledger(ledger)
    # The latest three stay in the record (ORD-008 on the tool's line, so not repeated).
    assert LATEST_LOOKED_UP == 3
    assert "latest: order_id=ORD-008" in text
    assert "IDENTIFIERS: ORD-006, ORD-007" in text.splitlines()
    assert "ORD-005" not in text and "ORD-001" not in text
    # The others are counted in one line that says where they are.
    assert text.splitlines()[-1] == archived_line(8 - LATEST_LOOKED_UP)
    assert text.splitlines()[-1] == (
        "Older looked-up identifiers in the archive (read_history query=<id>): 5"
    )


def test_an_id_a_side_effect_or_a_failure_touched_stays_listed_though_looked_up() -> None:
    messages = [
        *lookups(6),
        HumanMessage("Refund ORD-001 and charge ORD-002."),
        AIMessage(
            "",
            tool_calls=[
                call("refund_order", "refund_1", order_id="ORD-001", idempotency_key="rf-1001"),
                call("charge_card", "charge_1", order_id="ORD-002", amount="$7.50"),
                call("lookup_order", "look_x", order_id="ORD-003"),
            ],
        ),
        ToolMessage(content="refunded", tool_call_id="refund_1"),
        ToolMessage(content="Error: declined", tool_call_id="charge_1", status="error"),
        ToolMessage(content="Error: timed out", tool_call_id="look_x", status="error"),
    ]
    ledger = derive_ledger(messages)
    # The refund (a side effect), the failed charge and the failed lookup keep theirs.
    for identifier in ("ORD-001", "ORD-002", "ORD-003", "rf-1001", "$7.50"):
        assert identifier in ledger["identifiers"]
        assert identifier not in ledger.get("looked_up", [])
    assert ledger.get("looked_up") == ["ORD-004", "ORD-005", "ORD-006"]
    # Acted on in a later compaction: it moves from the index to the list.
    later = derive_ledger(
        [
            HumanMessage("Cancel ORD-004."),
            AIMessage("", tool_calls=[call("cancel_order", "cancel_1", order_id="ORD-004")]),
            ToolMessage(content="cancelled", tool_call_id="cancel_1"),
        ]
    )
    merged = merge_ledgers(ledger, later)
    assert "ORD-004" in merged["identifiers"]
    assert merged.get("looked_up") == ["ORD-005", "ORD-006"]


def test_the_index_is_bounded_and_counts_what_it_drops() -> None:
    ledger = empty_ledger()
    for start in range(0, 30, 5):
        slice_ = [m for n in range(start + 1, start + 6) for m in lookup(n)]
        ledger = bound_ledger(
            merge_ledgers(ledger, derive_ledger(slice_)), max_tool_calls=8, max_identifiers=10
        )
    assert ledger.get("looked_up") == [f"ORD-{n:03d}" for n in range(21, 31)]
    assert ledger.get("folded_looked_up") == 20
    text = render_ledger(ledger)
    assert "IDENTIFIERS: ORD-028, ORD-029" in text  # ORD-030 is on the tool's line
    assert text.splitlines()[-1] == archived_line(27)


def test_a_record_without_the_index_reads_as_before() -> None:
    old = {
        "tool_calls": [],
        "aggregated": {"lookup_order": 4},
        "folded_calls": {},
        "constraints": [],
        "folded_constraints": 0,
        "identifiers": ["A-1001", "B-2002"],
        "user_turns": 4,
    }
    ledger = read_ledger(old)
    assert "looked_up" not in ledger and "folded_looked_up" not in ledger
    assert render_ledger(old).splitlines()[-1] == "IDENTIFIERS: A-1001, B-2002"
    # Merged with a new slice, the old list stays listed and the new lookups are indexed.
    merged = merge_ledgers(old, derive_ledger(lookup(7)))
    assert merged["identifiers"] == ["A-1001", "B-2002"]
    assert merged.get("looked_up") == ["ORD-007"]


def test_a_tight_budget_drops_the_count_line_first() -> None:
    messages = [
        *lookups(12),
        HumanMessage("Charge ORD-012."),
        AIMessage("", tool_calls=[call("charge_card", "charge_1", order_id="ORD-012")]),
        ToolMessage(content="Error: card declined", tool_call_id="charge_1", status="error"),
    ]
    ledger = derive_ledger(messages)
    charge = "- [failed] charge_card(order_id=ORD-012) id=charge_1 — error: Error: card declined"
    full = render_ledger(ledger)
    assert charge in full and archived_line(8) in full  # ORD-012 was charged: listed
    small = render_ledger_within(ledger, 80)
    assert charge in small
    assert "Older looked-up identifiers" not in small
    assert render_ledger_within(ledger, 10_000) == full
    # At no budget do the index or its count push out a line the record had without them.
    bare = {k: v for k, v in ledger.items() if k not in ("looked_up", "folded_looked_up")}
    for budget in range(40, 200, 4):
        without = render_ledger_within(bare, budget)
        within = render_ledger_within(ledger, budget)
        kept = [line for line in without.splitlines() if not line.startswith("IDENTIFIERS")]
        assert [line for line in kept if line not in within.splitlines()] == [], budget


# --- an exact lookup in the archive, through the graph ----------------------------------------

ASK = HumanMessage("Which turn was about my first order?", id="h9")
FIRST = ORDERS[0]


def _asking_session() -> Session:
    """The order session: turns 1-7 look up one order each, turn 9 asks the archive."""
    agent = order_agent()
    history_call = AIMessage(
        content="",
        id="a9",
        tool_calls=[{"name": "read_history", "args": {"query": FIRST}, "id": "rh-id"}],
    )

    def reply(request: list[BaseMessage]) -> AIMessage:
        if latest_user(request).id != "h9":
            return agent(request)
        if isinstance(request[-1], ToolMessage):
            return AIMessage(f"{FIRST} was asked about in the first turn.", id="r9")
        return history_call

    return make_session(main=ScriptedChatModel(responder=reply), summarizer=demo_summarizer())


def _check_folded(state: dict[str, Any]) -> None:
    """Several compactions folded the first order's turn; the record only counts it."""
    assert state["compaction"]["version"] >= 3
    ledger = state["summary"]["ledger"]
    assert FIRST not in ledger["identifiers"]
    assert FIRST in ledger.get("looked_up", []) or ledger.get("folded_looked_up", 0) > 0
    text = render_ledger(ledger)
    assert FIRST not in text
    assert "Older looked-up identifiers in the archive (read_history query=<id>)" in text


def _expected() -> str:
    """Every line of the first turn's transcript mentions the order, oldest first."""
    return "\n".join(f"v1: {line}" for line in transcript_of(1).splitlines())


def _found(result: dict[str, Any]) -> ToolMessage:
    results = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    found = next(m for m in results if m.tool_call_id == "rh-id")
    assert found.status == "success"
    return found


def test_read_history_finds_a_looked_up_id_by_exact_lookup() -> None:
    session = _asking_session()
    session.turns(*range(1, 8))
    _check_folded(session.state())
    result = session.graph.invoke({"messages": [ASK]}, session.config, context=CTX)
    assert _found(result).content == _expected()
    assert result["messages"][-1].content == f"{FIRST} was asked about in the first turn."


async def test_read_history_finds_a_looked_up_id_by_exact_lookup_async() -> None:
    session = _asking_session()
    for n in range(1, 8):
        await session.graph.ainvoke(
            {"messages": [HumanMessage(f"Where is order {ORDERS[n - 1]}?", id=f"h{n}")]},
            session.config,
            context=CTX,
        )
    _check_folded(dict((await session.graph.aget_state(session.config)).values))
    result = await session.graph.ainvoke({"messages": [ASK]}, session.config, context=CTX)
    assert _found(result).content == _expected()


def test_an_exact_lookup_matches_whole_tokens_only() -> None:
    session = _asking_session()
    session.turns(*range(1, 8))
    prefix = FIRST[:-1]  # "A-100" is in "A-1001" but is not that id
    agent_call = AIMessage(
        content="",
        id="a9",
        tool_calls=[{"name": "read_history", "args": {"query": prefix}, "id": "rh-id"}],
    )
    session.main.responder = lambda request: (
        AIMessage("none", id="r9") if isinstance(request[-1], ToolMessage) else agent_call
    )
    result = session.graph.invoke({"messages": [ASK]}, session.config, context=CTX)
    assert _found(result).content == f"no archived message mentions {prefix!r}"
