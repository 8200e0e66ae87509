"""The cost benchmark's sessions: a user asking about orders, turn after turn.

Every user turn names one order; the main model calls the read-only
``lookup_order(order_id)`` tool and then answers from its result. Four variants:

- ``orders``: results of 200-1,500 tokens, the plain session;
- ``large-results``: results of 3,000-6,000 tokens;
- ``constraints``: the plain session, every user message ending with a constraint;
- ``short``: the seed tutorial's order assistant, short Chinese questions
  (``第128个问题：请帮我查一下订单 X128 的物流状态，另外提醒我不要改收货地址。``, the
  reminder worded a little differently each time) and one-line results
  (``订单 X128：已发货，预计明天送达。``).

Everything is a pure function of the seed, so all systems see the same turns, and the
scripted main model (``bench.session.make_main_responder``) answers from the messages alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.tools import BaseTool, StructuredTool

from bench.session import (
    STANDING_CONSTRAINT,
    Session,
    ToolPlan,
    Turn,
    call_key,
    stable_rng,
    tool_result,
)


@dataclass(frozen=True)
class SessionKind:
    """One variant of the order-lookup session."""

    name: str
    description: str
    result_tokens: tuple[int, int]
    constraints: bool = False
    short: bool = False
    """The tutorial's short questions and one-line results (``result_tokens`` unused)."""


SESSION_KINDS: dict[str, SessionKind] = {
    kind.name: kind
    for kind in (
        SessionKind("orders", "order lookups, results of 200-1,500 tokens", (200, 1500)),
        SessionKind("large-results", "order lookups, results of 3,000-6,000 tokens", (3000, 6000)),
        SessionKind(
            "constraints",
            "order lookups, a constraint in every user message",
            (200, 1500),
            constraints=True,
        ),
        SessionKind(
            "short",
            "short order questions repeating a constraint, one-line results",
            (0, 0),
            constraints=True,
            short=True,
        ),
    )
}
"""The session variants by name (``--sessions``)."""

_ASKS = (
    "Please look up order {order} and tell me where it is.",
    "Can you check order {order}? The customer says nothing has moved for days.",
    "What is the status of order {order}? I need it for a callback.",
    "Look up {order} for me, the customer wants to know the carrier.",
    "Where is order {order} right now, and when was the last scan?",
)
_DETAILS = (
    "The customer has written twice already, so keep it short.",
    "I will paste your answer into the ticket.",
    "Finance asked about the total as well.",
    "If the parcel is held somewhere, say where.",
    "Mention the carrier so I can open a claim if needed.",
    "The customer is in a different time zone, so be precise about dates.",
    "Tell me if anything in the event log looks unusual.",
)
_CONSTRAINT_FORMS = (
    "{c}。",
    "记得{c}。",
    "还是{c}。",
    "Remember: {c}.",
    "处理 {order} 时也{c}。",
)

_SHORT_REMINDERS = (
    "另外提醒我{c}",
    "另外记得提醒我{c}",
    "还有，提醒我{c}",
    "另外别忘了提醒我{c}",
    "顺便提醒我一下{c}",
)
"""How a short question repeats the constraint, mid-sentence."""
_SHORT_STATES = (
    "已发货，预计明天送达",
    "运输中，预计后天送达",
    "已签收",
    "待发货，预计本周五发出",
    "已到达派送站，今天派送",
)

_FACT_TEMPLATES = (
    "Prefers answers in {style}.",
    "Works on the {team} team in the {region} region.",
    "Handles escalations for {team} on {weekday}s.",
    "Wants order totals quoted in {currency}.",
    "Usually pastes answers into tickets, so likes {style}.",
    "Needs carrier names spelled out in full for {region} claims.",
)
_STYLES = ("short bullet points", "plain sentences", "a table", "one paragraph")
_TEAMS = ("billing", "logistics", "support", "returns", "partner", "finance")
_REGIONS = ("EMEA", "APAC", "North America", "LATAM", "Nordics", "DACH")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
_CURRENCIES = ("EUR", "USD", "SEK", "JPY", "GBP")


def _order_id(index: int, seed: int) -> str:
    """A unique order id per turn (the index keeps it unique, the seed varies the rest)."""
    return f"ORD-{stable_rng(seed, 'order', index).randint(10, 99)}{index:04d}"


def _user_text(index: int, order: str, seed: int, constraints: bool) -> str:
    rng = stable_rng(seed, "user", index)
    parts = [rng.choice(_ASKS).format(order=order)]
    parts.extend(rng.sample(_DETAILS, rng.randint(1, 3)))
    if constraints:
        form = rng.choice(_CONSTRAINT_FORMS)
        parts.append(form.format(c=STANDING_CONSTRAINT, order=order))
    return " ".join(parts)


def _short_turn(index: int, seed: int) -> tuple[str, str, str]:
    """A ``short`` turn: its order id, the question and the one-line result."""
    number = index + 1
    order = f"X{number}"
    reminder = stable_rng(seed, "reminder", index).choice(_SHORT_REMINDERS)
    text = (
        f"第{number}个问题：请帮我查一下订单 {order} 的物流状态，"
        f"{reminder.format(c=STANDING_CONSTRAINT)}。"
    )
    state = stable_rng(seed, "state", index).choice(_SHORT_STATES)
    return order, text, f"订单 {order}：{state}。"


def _short_session(turns: int, seed: int) -> Session:
    made: list[Turn] = []
    results: dict[str, str] = {}
    for index in range(turns):
        order, text, result = _short_turn(index, seed)
        args = {"order_id": order}
        plan = ToolPlan(name="lookup_order", args=args, call_id=f"call_{seed}_{index:04d}")
        results[call_key("lookup_order", args)] = result
        made.append(Turn(index, text, plan))
    return Session(seed=seed, turns=tuple(made), results=results)


def order_session(turns: int, kind: SessionKind, seed: int = 7) -> Session:
    """``turns`` user turns, each asking about one order: one ``lookup_order`` call per turn."""
    if turns < 1:
        raise ValueError(f"a session needs at least one turn, got {turns}")
    if kind.short:
        return _short_session(turns, seed)
    made: list[Turn] = []
    results: dict[str, str] = {}
    for index in range(turns):
        order = _order_id(index, seed)
        args = {"order_id": order}
        plan = ToolPlan(name="lookup_order", args=args, call_id=f"call_{seed}_{index:04d}")
        target = stable_rng(seed, "size", index).randint(*kind.result_tokens)
        key = call_key("lookup_order", args)
        results[key] = tool_result("lookup_order", args, target, stable_rng(seed, key))
        made.append(Turn(index, _user_text(index, order, seed, kind.constraints), plan))
    return Session(seed=seed, turns=tuple(made), results=results)


def order_tools(session: Session) -> list[BaseTool]:
    """The session's one tool: the read-only ``lookup_order``."""

    def lookup_order(order_id: str) -> str:
        return session.result("lookup_order", {"order_id": order_id})

    return [
        StructuredTool.from_function(
            func=lookup_order, description="Look up an order's status, carrier and event log."
        )
    ]


def user_facts(count: int, seed: int = 7) -> list[str]:
    """``count`` distinct facts about the user, the same for every system."""
    facts: list[str] = []
    index = 0
    while len(facts) < count:
        rng = stable_rng(seed, "fact", index)
        index += 1
        fact = rng.choice(_FACT_TEMPLATES).format(
            style=rng.choice(_STYLES),
            team=rng.choice(_TEAMS),
            region=rng.choice(_REGIONS),
            weekday=rng.choice(_WEEKDAYS),
            currency=rng.choice(_CURRENCIES),
        )
        fact = f"{fact} (noted for case {len(facts) + 1})"
        facts.append(fact)
    return facts
