"""One summary prose for every system of the cost benchmark, and how a summary call is known.

Every system's summaries come from ``shared_summary``: the same four sections (the
headings ctxgraph's parser reads, ``ctxgraph.nodes.compaction.sections``), of about 300
tokens, built from the content of the previous summary and the folded messages alone
(the newest order ids they name and whether they repeat the standing constraint),
whatever form the prompt gives them in (ctxgraph's ``<folded_messages>`` transcript,
LangChain's ``<messages>`` list, or the messages themselves before a shared-prefix
summary request). So what differs between
ctxgraph's summary record and a peer's summary message is what ctxgraph adds to it (the
ledger), not two scripts.

ctxgraph runs with the default model setup, the main model writing the summaries, so its
one scripted main model answers summary calls too (``summary_aware``): a call whose last
message carries the ``summary_request`` origin (a summary request sharing the main
request's prefix), or a compact summary request (its system message is ctxgraph's
``SUMMARY_SYSTEM``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage

from bench.session import STANDING_CONSTRAINT
from ctxgraph.nodes.compaction.sections import TITLES
from ctxgraph.nodes.compaction.summarizer import SUMMARY_SYSTEM
from ctxgraph.state.messages import ORIGIN_KEY, content_text

SUMMARY_REQUEST_ORIGIN = "summary_request"
"""The origin mark of the last message of a shared-prefix summary request."""

LATEST_ORDERS = 6
"""How many of the newest order ids the prose names."""

ORDER_ID = re.compile(r"(?<![A-Za-z0-9-])(?:ORD-\d{6}|X\d{1,5})(?![\d-])")
"""The order ids of the cost sessions: ``ORD-120042`` and ``X128``."""

_USER_LINE = re.compile(r'^human: (.*)$|<message type="human">(.*?)</message>', re.M | re.S)
_FOLDED = re.compile(r"<folded_messages>\n?(.*?)\n?</folded_messages>", re.DOTALL)
_PREVIOUS = re.compile(r"<previous_summary>\n?(.*?)\n?</previous_summary>", re.DOTALL)
_INTRO = (
    "An operations agent is working through a queue of customer questions about orders, one "
    "order per message, and wants a short delivery status for each that can be pasted into "
    "the customer's ticket as it is."
)
_RULE = (
    f"Every message repeats the same standing rule, {STANDING_CONSTRAINT} (do not change the "
    "delivery address): no order may have its address edited, whatever a customer asks for."
)
_NO_RULE = "No standing rule about the orders has been stated so far."


def is_summary_call(messages: Sequence[BaseMessage]) -> bool:
    """Whether a call to the main model is ctxgraph asking it for a summary."""
    if not messages:
        return False
    if messages[-1].additional_kwargs.get(ORIGIN_KEY) == SUMMARY_REQUEST_ORIGIN:
        return True
    return content_text(messages[0]) == SUMMARY_SYSTEM


def folded_text(messages: Sequence[BaseMessage]) -> str:
    """The previous summary and the folded messages of a summary call, as one text.

    Whatever the prompt's form: ctxgraph's compact request (its ``<previous_summary>``
    and ``<folded_messages>`` blocks), a shared-prefix request (the conversation before
    the request, with the previous record but no other data message), or LangChain's
    prompt (its ``<messages>``, the previous summary among them).
    """
    if messages and messages[-1].additional_kwargs.get(ORIGIN_KEY) == SUMMARY_REQUEST_ORIGIN:
        return "\n".join(
            f"{m.type}: {content_text(m)}"
            for m in messages[:-1]
            if not isinstance(m, SystemMessage)
            and m.additional_kwargs.get(ORIGIN_KEY, "summary") == "summary"
        )
    for message in reversed(messages):
        text = content_text(message)
        found = _FOLDED.search(text)
        if found:
            previous = _PREVIOUS.search(text)
            return (previous.group(1) + "\n" if previous else "") + found.group(1)
    text = content_text(messages[-1]) if messages else ""
    return text.rsplit("<messages>", 1)[-1]


def latest_user_words(folded: str, words: int = 12) -> str:
    """The first ``words`` words of the last user message in ``folded`` (any prompt form)."""
    said = [
        (m.group(1) or m.group(2) or "").strip()
        for m in _USER_LINE.finditer(folded)
        if not (m.group(1) or m.group(2) or "").startswith("Here is a summary")
    ]
    return " ".join(said[-1].split()[:words]) if said else ""


def shared_summary(folded: str) -> str:
    """The four-section prose for ``folded`` (about 300 tokens), the same for every system.

    It names the newest order ids of the folded messages (without any, the start of the
    latest user message), so it changes from one compaction to the next.
    """
    ids = list(dict.fromkeys(reversed(ORDER_ID.findall(folded))))[:LATEST_ORDERS][::-1]
    latest = latest_user_words(folded)
    last = ids[-1] if ids else f"the message that began “{latest}”"
    named = ", ".join(ids) or "none yet"
    rule = STANDING_CONSTRAINT in folded
    sections = {
        "session_intent": f"{_INTRO} {_RULE if rule else _NO_RULE}",
        "summary": (
            f"The folded part of the conversation covered the orders up to {last}; the most "
            f"recent of them were {named}. Each question named exactly one order, and each "
            "answer gave its shipping state, the carrier and the expected delivery date in a "
            "sentence or two. Nothing was changed on any order: the work so far is read-only, "
            "and no ticket, email or refund was opened. No order raised a dispute, a damaged "
            "parcel or a customs hold that would need a follow-up later. Answers stayed short, "
            "because the person asking pastes them straight into the customer thread."
        ),
        "artifacts": (
            f"Order identifiers discussed most recently: {named}. Earlier order identifiers "
            "stay in the thread history and can be searched there if a customer comes back to "
            "one of them. No files, tickets or offloaded documents were produced."
        ),
        "next_steps": (
            "Keep answering one order per message in the same short form, starting with "
            f"whatever order comes after {last}. "
            + (
                f"Keep to {STANDING_CONSTRAINT} for every order, also when a customer insists. "
                if rule
                else ""
            )
            + "If a customer asks to change anything about an order, say that this assistant "
            "only reports its status and hand the request to the order desk."
        ),
    }
    return "\n\n".join(f"{TITLES[key]}\n{text}" for key, text in sections.items())


def summary_responder(messages: list[BaseMessage]) -> AIMessage:
    """A summary model (a peer's, or ctxgraph's main model asked for a summary)."""
    return AIMessage(content=shared_summary(folded_text(messages)))


def summary_aware(
    respond: Callable[[list[BaseMessage]], AIMessage],
) -> Callable[[list[BaseMessage]], AIMessage]:
    """``respond``, except that summary calls get the shared prose."""

    def answer(messages: list[BaseMessage]) -> AIMessage:
        if is_summary_call(messages):
            return summary_responder(messages)
        return respond(messages)

    return answer
