"""A deterministic long session: user turns, tools with large results, scripted models.

Everything here is a pure function of the seed (or, for the models, of the messages they
are sent), so two systems driven by the same session see comparable requests.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool

from ctxgraph.nodes.compaction.summarizer import SUMMARY_SYSTEM
from ctxgraph.state.demo_replies import demo_summary
from ctxgraph.state.tokens import count_text

USER_WORDS = (20, 60)
"""Words in one user message (inclusive range)."""

ANSWER_WORDS = (30, 80)
"""Words in one text answer of the main model (inclusive range)."""

RESULT_TOKENS = (200, 1500)
"""Target tokens of one tool result (inclusive range)."""

TOOL_SHARE = 1 / 3
"""Share of user turns that make the model call a tool."""

SIDE_EFFECT_SHARE = 0.3
"""Share of tool calls that go to a side-effect tool."""

NEW_CONSTRAINT_SHARE = 0.04
"""With constraints on: share of user turns that add a constraint not said before."""

REPEAT_CONSTRAINT_SHARE = 0.05
"""With constraints on: share of user turns that repeat an earlier added constraint."""

TIED_CONSTRAINT_SHARE = 0.3
"""With constraints on: share of turns that tie the standing constraint to one order."""

READ_ONLY_TOOLS = ("lookup_order", "get_customer", "list_invoices", "search_docs")
SIDE_EFFECT_TOOLS = ("create_ticket", "send_email", "update_order")

_NAMES = (
    "Priya", "Marcus", "Elena", "Tomasz", "Aiko", "Dmitri", "Fatima", "Jonas", "Lucia",
    "Oskar", "Mei", "Rahul", "Sofia", "Kwame", "Ingrid", "Mateo",
)  # fmt: skip
_SURNAMES = (
    "Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Haddad", "Brennan", "Costa",
    "Kowalski", "Sato", "Fischer", "Almeida",
)  # fmt: skip
_TEAMS = ("billing", "logistics", "support", "platform", "finance", "partner", "returns")
_REGIONS = ("EMEA", "APAC", "North America", "LATAM", "Nordics", "DACH")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
_TOPICS = (
    "partial refunds", "split shipments", "address changes after dispatch",
    "invoice disputes", "backorders", "carrier claims", "subscription pauses",
    "tax exemptions", "bulk discounts", "warehouse transfers", "chargebacks",
    "delivery windows", "gift card balances", "return labels", "price matching",
)  # fmt: skip
_STATUSES = ("on_hold", "ready_to_ship", "cancelled", "escalated", "awaiting_payment")
_PRIORITIES = ("low", "normal", "high", "urgent")
_QUERIES = (
    "refund approval limits", "carrier damage claims", "customs paperwork for returns",
    "failed payment retries", "warehouse cut-off times", "invoice correction steps",
    "escalation rota", "address verification errors", "partial shipment rules",
    "VAT on cross-border returns", "SLA credits", "duplicate charge handling",
)  # fmt: skip
_WORDS = (
    "the", "customer", "order", "shipment", "carrier", "warehouse", "invoice", "payment",
    "refund", "account", "status", "update", "note", "agent", "request", "delivery",
    "address", "parcel", "label", "return", "credit", "balance", "policy", "approval",
    "team", "queue", "priority", "handled", "confirmed", "pending", "scheduled", "after",
    "before", "because", "while", "and", "with", "for", "from", "into", "about", "was",
    "were", "has", "had", "will", "should", "could", "not", "also", "again", "today",
    "yesterday", "morning", "afternoon", "region", "route", "depot", "scan", "manifest",
    "signature", "damaged", "missing", "delayed", "rerouted", "held", "released", "checked",
    "verified", "customs", "broker", "duty", "tax", "discount", "bundle", "item", "line",
    "quantity", "price", "total", "currency", "exchange", "rate", "window", "slot", "dock",
    "pallet", "tracking", "event", "exception", "contact", "email", "phone", "callback",
    "ticket", "escalation", "manager", "supervisor", "audit", "log", "record", "entry",
)  # fmt: skip

_CHAT_REQUESTS = (
    "Can you explain how {topic} usually work for {region} customers?",
    "Draft a short reply to {person} about our policy on {topic}.",
    "What would you recommend for {topic} if the {team} team is short-staffed?",
    "Summarize the tradeoffs of handling {topic} manually versus through the {team} queue.",
    "How should I word an apology to {person} about the delay with {topic}?",
    "Give me a checklist for reviewing {topic} before the {weekday} sync.",
    "Is there a simpler way to explain {topic} to a new agent on the {team} team?",
)
_CONTEXT = (
    "We promised {person} an answer by {weekday}.",
    "The {team} team is short-staffed this week, so keep it practical.",
    "Refunds above {amount} need approval from {person}, so flag anything bigger.",
    "This is for the {region} region only.",
    "I already checked the dashboard and nothing looked unusual there.",
    "Keep the tone friendly but firm, the customer has written three times already.",
    "Do not promise a delivery date we cannot keep.",
    "If anything is unclear, tell me instead of guessing.",
    "Last month we had a similar case with {topic} and it took two weeks to settle.",
    "My manager {person} will read this later, so be precise.",
    "Please mention the relevant numbers so I can paste them into the ticket.",
    "We are trying to close the backlog before the end of the quarter.",
)

_ANSWER_OPENERS = (
    "Here is what I found.",
    "Short version first.",
    "Based on what we have so far, this looks manageable.",
    "I looked through everything above.",
    "Good question.",
)
_ANSWER_SENTENCES = (
    "The main thing to watch is {subject}, which drives most of the follow-up work.",
    "I would confirm {subject} with the customer before changing anything else.",
    "Nothing here contradicts what we discussed earlier about {subject}.",
    "If {subject} changes again, we should note it in the ticket and tell the team.",
    "The safest next step is to double-check {subject} and then reply.",
    "I kept the wording neutral so it can be forwarded without edits.",
    "Let me know if you want a shorter version for the customer.",
    "There is no sign of a duplicate charge in what I can see.",
    "The timeline still fits the promise we made on the last call.",
    "I would keep {subject} in the notes for whoever picks this up next.",
    "The customer has been patient, so a quick and clear reply will go a long way.",
)


@dataclass(frozen=True)
class ToolPlan:
    """The tool call the main model makes for one user turn."""

    name: str
    args: dict[str, str]
    call_id: str


@dataclass(frozen=True)
class Turn:
    """One user turn of the session."""

    index: int
    text: str
    plan: ToolPlan | None


@dataclass(frozen=True)
class Session:
    """The user turns, the tool call each turn asks for, and every tool result."""

    seed: int
    turns: tuple[Turn, ...]
    results: dict[str, str]
    constraints: tuple[str, ...] = ()
    """The constraints added along the way (the standing one aside), in order."""
    plans: dict[str, ToolPlan] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        plans = {turn.text: turn.plan for turn in self.turns if turn.plan is not None}
        object.__setattr__(self, "plans", plans)

    def plan_for(self, user_text: str) -> ToolPlan | None:
        """The tool call planned for a user message, if any."""
        return self.plans.get(user_text)

    def result(self, name: str, args: dict[str, Any]) -> str:
        """The stored result of a tool call; raises ``KeyError`` for a call never planned."""
        return self.results[call_key(name, args)]

    @property
    def tool_turns(self) -> int:
        """How many turns call a tool."""
        return sum(1 for turn in self.turns if turn.plan is not None)


def call_key(name: str, args: dict[str, Any]) -> str:
    """A stable key for a tool call: its name and its arguments."""
    return f"{name}:{json.dumps(args, sort_keys=True, ensure_ascii=False)}"


def stable_rng(*parts: object) -> random.Random:
    """A random generator seeded from text, identical across processes."""
    return random.Random(zlib.crc32("\x1f".join(str(p) for p in parts).encode("utf-8")))


class _Ids:
    """Unique identifiers for one session."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._seen: set[str] = set()

    def make(self, pattern: Callable[[random.Random], str]) -> str:
        while True:
            value = pattern(self._rng)
            if value not in self._seen:
                self._seen.add(value)
                return value

    def order(self) -> str:
        return self.make(lambda r: f"ORD-{r.randint(10000, 99999)}")

    def customer(self) -> str:
        return self.make(lambda r: f"CUS-{r.randint(1000, 9999)}")

    def account(self) -> str:
        return self.make(lambda r: f"ACC-{r.randint(1000, 9999)}")

    def email(self) -> str:
        return self.make(
            lambda r: (
                f"{r.choice(_NAMES).lower()}.{r.choice(_SURNAMES).lower()}"
                f"{r.randint(1, 99)}@example.com"
            )
        )


def _person(rng: random.Random) -> str:
    return f"{rng.choice(_NAMES)} {rng.choice(_SURNAMES)}"


def _amount(rng: random.Random) -> str:
    return f"${rng.randint(2, 90) * 50:,}"


def _fill(template: str, rng: random.Random) -> str:
    return template.format(
        topic=rng.choice(_TOPICS),
        region=rng.choice(_REGIONS),
        person=_person(rng),
        team=rng.choice(_TEAMS),
        weekday=rng.choice(_WEEKDAYS),
        amount=_amount(rng),
    )


def _tool_request(name: str, rng: random.Random, ids: _Ids) -> tuple[dict[str, str], str]:
    """Arguments for a tool call and the sentence a user would write to ask for it."""
    if name == "lookup_order":
        order = ids.order()
        return {"order_id": order}, f"Please look up order {order} and tell me where it is."
    if name == "get_customer":
        customer = ids.customer()
        return (
            {"customer_id": customer},
            f"Pull the account record for customer {customer} before I call them back.",
        )
    if name == "list_invoices":
        account = ids.account()
        return (
            {"account_id": account},
            f"List the open invoices for account {account}, finance wants them today.",
        )
    if name == "search_docs":
        query = ids.make(lambda r: f"{r.choice(_QUERIES)} in {r.choice(_REGIONS)}")
        return {"query": query}, f"Search the runbooks for {query} and tell me what they say."
    if name == "create_ticket":
        title = f"{rng.choice(_TOPICS).capitalize()} for {ids.order()}"
        priority = rng.choice(_PRIORITIES)
        return (
            {"title": title, "priority": priority},
            f"Open a {priority} priority ticket titled '{title}' "
            f"for the {rng.choice(_TEAMS)} team.",
        )
    if name == "send_email":
        to = ids.email()
        subject = f"Update on {ids.order()}"
        return (
            {"to": to, "subject": subject},
            f"Send an email to {to} with the subject '{subject}' and a short status update.",
        )
    if name == "update_order":
        order = ids.order()
        status = rng.choice(_STATUSES)
        return (
            {"order_id": order, "status": status},
            f"Set order {order} to {status} in the system.",
        )
    raise ValueError(f"unknown tool {name!r}")


_CLOSERS = ("Thanks.", "Thanks in advance.", "Appreciate it.", "Cheers.")

STANDING_CONSTRAINT = "不要改收货地址"
"""The constraint the user repeats in every turn when constraints are on."""

_STANDING_FORMS = (
    "{c}。", "{c}。", "{c}", "{c}！", "记得{c}。", "还是{c}。", "请{c}。", "{c} 。",
    "Remember: {c}.", "也{c}。",
)  # fmt: skip
"""Ways the user repeats the standing constraint: punctuation, spacing and fillers vary."""

_TIED_FORMS = ("处理 {order} 时也{c}。", "{order} 那边也一样，{c}。", "For {order} too: {c}.")
"""The standing constraint tied to one order: a new constraint each time it is said."""

_NEW_CONSTRAINTS = (
    "退款金额不能超过{amount}。",
    "Never email {person} before {weekday}.",
    "{order} 只能走顺丰发货。",
    "Do not close tickets of the {team} team without a note.",
    "Always copy {person} on refunds above {amount}.",
    "{order} 的发票必须开给公司抬头。",
    "Never promise {region} customers a delivery date.",
    "不要给 {order} 申请部分退款。",
)
"""Templates of constraints the user adds now and then; each filled one is new."""


def _constraint_form(text: str, rng: random.Random) -> str:
    """One way of saying ``text`` again: end punctuation, spacing and case may change."""
    core = text.rstrip("。.！!")
    ending = "。" if re.search(r"[\u4e00-\u9fff]", core) else "."
    return rng.choice(
        (f"{core}{ending}", f"{core} {ending}", f"{core}!", f"{core.lower()}{ending}")
    )


def _constraints_for(rng: random.Random, ids: _Ids, added: list[str], index: int) -> list[str]:
    """The constraint sentences one user turn ends with (the standing one comes last)."""
    said: list[str] = []
    if index and rng.random() < NEW_CONSTRAINT_SHARE:
        template = rng.choice(_NEW_CONSTRAINTS)
        new = template.format(
            amount=_amount(rng),
            person=_person(rng),
            weekday=rng.choice(_WEEKDAYS),
            order=ids.order(),
            team=rng.choice(_TEAMS),
            region=rng.choice(_REGIONS),
        )
        added.append(new)
        said.append(new)
    elif added and rng.random() < REPEAT_CONSTRAINT_SHARE:
        said.append(_constraint_form(rng.choice(added), rng))
    if rng.random() < TIED_CONSTRAINT_SHARE:
        said.append(rng.choice(_TIED_FORMS).format(order=ids.order(), c=STANDING_CONSTRAINT))
    else:
        said.append(rng.choice(_STANDING_FORMS).format(c=STANDING_CONSTRAINT))
    return said


def _compose(first: str, candidates: list[str], target: int, low: int, rng: random.Random) -> str:
    """``first``, then whole sentences from ``candidates`` while they fit ``target`` words."""
    words = first.split()
    pool = list(candidates)
    rng.shuffle(pool)
    for sentence in pool:
        if len(words) + len(sentence.split()) <= target:
            words.extend(sentence.split())
    while len(words) < low:
        words.extend(rng.choice(_CLOSERS).split())
    return " ".join(words)


def _user_text(rng: random.Random, request: str, target: int) -> str:
    context = [_fill(template, rng) for template in _CONTEXT]
    return _compose(request, context, target, USER_WORDS[0], rng)


def _prose(rng: random.Random, low: int, high: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(low, high))]
    return " ".join(words).capitalize() + "."


def _stamp(rng: random.Random) -> str:
    return (
        f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}Z"
    )


def _result_header(name: str, args: dict[str, str], rng: random.Random) -> str:
    if name == "lookup_order":
        return (
            f"Order {args['order_id']} for customer CUS-{rng.randint(1000, 9999)}\n"
            f"status: {rng.choice(('in_transit', 'delivered', 'held_at_depot', 'processing'))}"
            f"; carrier: {rng.choice(('DHL', 'UPS', 'PostNord', 'DPD'))}; "
            f"total: {_amount(rng)}\nevent log:"
        )
    if name == "get_customer":
        return (
            f"Customer {args['customer_id']}: {_person(rng)}, tier "
            f"{rng.choice(('gold', 'silver', 'standard'))}, region {rng.choice(_REGIONS)}\n"
            "interaction history:"
        )
    if name == "list_invoices":
        return f"Invoices for {args['account_id']} (open and recently closed):"
    if name == "search_docs":
        return f"Search results for '{args['query']}':"
    if name == "create_ticket":
        return (
            f"Ticket TCK-{rng.randint(1000, 9999)} created with priority {args['priority']}: "
            f"{args['title']}\nsimilar open tickets and audit trail:"
        )
    if name == "send_email":
        return (
            f"Email to {args['to']} queued, subject '{args['subject']}', message id "
            f"<{rng.randint(10**8, 10**9)}@mail.example.com>\ndelivery log:"
        )
    return f"Order {args['order_id']} status changed to {args['status']}\naudit trail of the order:"


def _result_line(name: str, args: dict[str, str], rng: random.Random) -> str:
    if name == "list_invoices":
        return (
            f"INV-2024-{rng.randint(1000, 9999)} | {_stamp(rng)[:10]} | {_amount(rng)} | "
            f"{rng.choice(('open', 'paid', 'overdue', 'disputed'))} | {_prose(rng, 6, 14)}"
        )
    if name == "search_docs":
        path = f"runbooks/{rng.choice(_TEAMS)}/{rng.choice(_TOPICS).replace(' ', '-')}.md"
        return f"- {path} (score 0.{rng.randint(40, 99)}): {_prose(rng, 20, 45)}"
    if name == "get_customer":
        return f"{_stamp(rng)} {rng.choice(('call', 'email', 'chat'))}: {_prose(rng, 12, 30)}"
    return f"{_stamp(rng)} {rng.choice(_TEAMS)}: {_prose(rng, 10, 28)}"


def tool_result(name: str, args: dict[str, str], target: int, rng: random.Random) -> str:
    """A realistic tool result of about ``target`` tokens."""
    lines = [_result_header(name, args, rng)]
    used = count_text(lines[0])
    while used < target:
        line = _result_line(name, args, rng)
        size = count_text(line) + 1
        if used + size > target:
            words = line.split()
            keep = max(1, -(-len(words) * (target - used) // size))
            lines.append(" ".join(words[:keep]))
            break
        lines.append(line)
        used += size
    return "\n".join(lines)


def generate_session(turns: int, seed: int = 7, *, constraints: bool = False) -> Session:
    """``turns`` user turns; about a third of them ask for a tool.

    With ``constraints``, every user message ends with the standing constraint
    (``STANDING_CONSTRAINT``, worded a little differently from turn to turn, and in
    ``TIED_CONSTRAINT_SHARE`` of the turns tied to one order, which makes it a new
    constraint); now and then a turn adds a new constraint or repeats an earlier one. The
    constraint sentences come from their own random stream, so the rest of the session is
    the same as without them.
    """
    if turns < 1:
        raise ValueError(f"a session needs at least one turn, got {turns}")
    rng = random.Random(seed)
    ids = _Ids(rng)
    said_rng = stable_rng(seed, "constraints")
    said_ids = _Ids(said_rng)
    added: list[str] = []
    made: list[Turn] = []
    results: dict[str, str] = {}
    seen: set[str] = set()
    for index in range(turns):
        plan: ToolPlan | None = None
        if rng.random() < TOOL_SHARE:
            tools = SIDE_EFFECT_TOOLS if rng.random() < SIDE_EFFECT_SHARE else READ_ONLY_TOOLS
            name = rng.choice(tools)
            args, request = _tool_request(name, rng, ids)
            plan = ToolPlan(name=name, args=args, call_id=f"call_{seed}_{index:04d}")
            target = rng.randint(*RESULT_TOKENS)
            results[call_key(name, args)] = tool_result(
                name, args, target, stable_rng(seed, call_key(name, args))
            )
        else:
            request = _fill(rng.choice(_CHAT_REQUESTS), rng)
        text = _user_text(rng, request, rng.randint(*USER_WORDS))
        if text in seen:
            text = f"{text[:-1]} (turn {index + 1})."
        seen.add(text)
        if constraints:
            text = " ".join([text, *_constraints_for(said_rng, said_ids, added, index)])
        made.append(Turn(index=index, text=text, plan=plan))
    return Session(seed=seed, turns=tuple(made), results=results, constraints=tuple(added))


def make_tools(session: Session) -> list[BaseTool]:
    """The session's tools: four read-only lookups and three side-effect tools."""

    def lookup_order(order_id: str) -> str:
        return session.result("lookup_order", {"order_id": order_id})

    def get_customer(customer_id: str) -> str:
        return session.result("get_customer", {"customer_id": customer_id})

    def list_invoices(account_id: str) -> str:
        return session.result("list_invoices", {"account_id": account_id})

    def search_docs(query: str) -> str:
        return session.result("search_docs", {"query": query})

    def create_ticket(title: str, priority: str) -> str:
        return session.result("create_ticket", {"title": title, "priority": priority})

    def send_email(to: str, subject: str) -> str:
        return session.result("send_email", {"to": to, "subject": subject})

    def update_order(order_id: str, status: str) -> str:
        return session.result("update_order", {"order_id": order_id, "status": status})

    described: list[tuple[Callable[..., str], str]] = [
        (lookup_order, "Look up an order's status, carrier and event log."),
        (get_customer, "Read a customer's profile and interaction history."),
        (list_invoices, "List the open and recently closed invoices of an account."),
        (search_docs, "Search the internal runbooks and policies."),
        (create_ticket, "Create a support ticket (side effect)."),
        (send_email, "Send an email to a customer (side effect)."),
        (update_order, "Change an order's status (side effect)."),
    ]
    return [StructuredTool.from_function(func=f, description=d) for f, d in described]


def _text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else message.text


_SUBJECT = re.compile(r"\b(?:ORD|CUS|ACC|TCK|INV)-[\d-]+\b|[\w.+-]+@[\w.-]+\.\w+")


def _answer(source: str, rng: random.Random) -> str:
    found = _SUBJECT.findall(source)
    subject = found[0] if found else rng.choice(_TOPICS)
    sentences = [template.format(subject=subject) for template in _ANSWER_SENTENCES]
    target = rng.randint(*ANSWER_WORDS)
    return _compose(rng.choice(_ANSWER_OPENERS), sentences, target, ANSWER_WORDS[0], rng)


def make_main_responder(session: Session) -> Callable[[list[BaseMessage]], AIMessage]:
    """The main model: depends only on the messages it is sent.

    A user message with a planned tool call gets that call; a tool result or any other
    user message gets a 30-80 word answer seeded by its text. A summary prompt (ctxgraph
    falls back to the main model when the summary model fails) gets the demo summary.
    """

    def respond(messages: list[BaseMessage]) -> AIMessage:
        if messages and _text(messages[0]) == SUMMARY_SYSTEM:
            return demo_summary(_text(messages[-1]))
        last = messages[-1]
        if isinstance(last, ToolMessage):
            source = _text(last)
            return AIMessage(content=_answer(source, stable_rng("tool", last.tool_call_id)))
        if not isinstance(last, HumanMessage):
            raise ValueError(f"the bench model cannot answer a {last.type} message")
        said = _text(last)
        plan = session.plan_for(said)
        if plan is not None:
            return AIMessage(
                content="",
                tool_calls=[{"name": plan.name, "args": dict(plan.args), "id": plan.call_id}],
            )
        return AIMessage(content=_answer(said, stable_rng("user", said)))

    return respond


def ctxgraph_summary_responder(messages: list[BaseMessage]) -> AIMessage:
    """ctxgraph's summary role: the deterministic demo summary of its prompt."""
    return demo_summary(_text(messages[-1]))


_XML_TYPE = re.compile(r'<message type="(\w+)"')
_XML_HUMAN = re.compile(r'<message type="human">(.*?)</message>', re.DOTALL)


def peer_summary_responder(messages: list[BaseMessage]) -> AIMessage:
    """The peer's summary model: a short four-section summary of whatever it is sent."""
    prompt = _text(messages[-1])
    history = prompt.rsplit("<messages>", 1)[-1]
    kinds = _XML_TYPE.findall(history)
    said = [h for h in _XML_HUMAN.findall(history) if not h.startswith("Here is a summary")]
    last = " ".join((said[-1] if said else "nothing").split()[:30])
    identifiers = list(dict.fromkeys(_SUBJECT.findall(history)))[-10:]
    return AIMessage(
        content="## SESSION INTENT\nHelp the user work through orders, invoices, tickets "
        "and customer emails in one long support session.\n\n"
        f"## SUMMARY\nSummarized {len(kinds)} messages: {kinds.count('human')} from the "
        f"user, {kinds.count('ai')} from the assistant, {kinds.count('tool')} tool results. "
        f"The user last asked: {last}\n\n"
        f"## ARTIFACTS\n{', '.join(identifiers) or 'None'}\n\n"
        "## NEXT STEPS\nContinue with the user's latest request."
    )
