"""The acceptance gate follows the user's words where they are plain, not a model's labels.

A durable statement about the user ("I'm a Python backend developer") is stored however
the model labelled it; a grant or a request to act ("you may push", "Ship B456 to my
office address") is never stored, however the model labelled it. The quote may carry a
speaker label or cite the wrong message when exactly one user message holds it; a quote
that no user message holds is still refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from ctxgraph.nodes.memory.gate import has_fact_cue
from ctxgraph.store.memory.cues import asks_for_action, states_durable_fact
from ctxgraph.store.memory.rules import (
    TRANSACTIONAL,
    UNCITED,
    FactCandidate,
    ProfileUpdate,
    accept_candidate,
)

DURABLE = [
    "Please always answer in Chinese from now on.",
    "I'm a Python backend developer, so I'm usually at my desk during the day.",
    "I prefer short answers, one or two sentences at most.",
    "My name is Lin, by the way.",
    "My office address is 88 Harbour Road, Floor 12, Shenzhen.",
    "我是一名Python后端开发人员。",
]
ACTIONS = [
    "You may push to main.",
    "Delete the files in /tmp.",
    "Ship B456 to my office address, not to my home.",
    "Go ahead and merge it.",
    "以后你都可以直接删除旧文件。",
    "Can you cancel A123?",
]
NEITHER = [
    "What language should you answer in, and what should you never do without asking me?",
    "Hi, I need help with a few of my orders today.",
    "Where is my order A123?",
    "I'm a bit confused by this.",
]


def rows(text: str) -> list[dict[str, str]]:
    return [
        {"id": "u1", "role": "user", "content": text},
        {"id": "a1", "role": "assistant", "content": "好的。"},
    ]


def fact(quote: str, **changes: Any) -> FactCandidate:
    fields: dict[str, Any] = {
        "key": "about_user",
        "content": "Something about the user.",
        "category": "context",
        "scope": "user",
        "durability": "durable",
        "authority": "transactional",
        "confidence": 1.0,
        "evidence_message_id": "u1",
        "evidence_text": quote,
    }
    return FactCandidate(**{**fields, **changes})


@pytest.mark.parametrize("text", DURABLE)
def test_the_cues_see_durable_statements(text: str) -> None:
    assert states_durable_fact(text) and not asks_for_action(text)
    assert has_fact_cue(text)  # the pre-model gate lets every one of them through


@pytest.mark.parametrize("text", ACTIONS)
def test_the_cues_see_grants_and_requests(text: str) -> None:
    assert asks_for_action(text) and not states_durable_fact(text)


@pytest.mark.parametrize("text", NEITHER)
def test_questions_and_small_talk_state_no_durable_fact(text: str) -> None:
    assert not states_durable_fact(text)


@pytest.mark.parametrize("text", DURABLE)
def test_a_durable_statement_labelled_transactional_is_stored_as_descriptive(text: str) -> None:
    decision = accept_candidate(fact(text), rows(text))
    assert decision.accepted is True and decision.target == "user"
    assert decision.reason == (
        "durable user fact (labelled transactional; its quote states a durable fact, "
        "asks no action)"
    )
    assert decision.candidate is not None
    assert decision.candidate.authority == "descriptive"
    # Everything else is the model's.
    assert decision.candidate.model_dump(exclude={"authority"}) == fact(text).model_dump(
        exclude={"authority"}
    )


@pytest.mark.parametrize("text", ACTIONS)
@pytest.mark.parametrize("authority", ["transactional", "descriptive"])
def test_a_grant_or_request_is_never_stored_whatever_its_label(text: str, authority: str) -> None:
    decision = accept_candidate(fact(text, authority=authority), rows(text))
    assert decision.accepted is False and decision.candidate is None
    expected = (
        TRANSACTIONAL
        if authority == "transactional"
        else "transactional by its words: the quote asks for an action, never remembered"
    )
    assert decision.reason == expected


@pytest.mark.parametrize("text", NEITHER)
def test_without_a_durable_statement_the_transactional_label_stands(text: str) -> None:
    decision = accept_candidate(fact(text), rows(text))
    assert (decision.accepted, decision.reason) == (False, TRANSACTIONAL)


def test_no_lift_when_the_message_or_the_content_asks_for_an_action() -> None:
    message = "My office address is 88 Harbour Road. Ship B456 there."
    quote = "My office address is 88 Harbour Road."
    in_message = accept_candidate(fact(quote), rows(message))
    assert (in_message.accepted, in_message.reason) == (False, TRANSACTIONAL)
    # The same quote alone lifts, unless the fact's content is itself a grant.
    assert accept_candidate(fact(quote), rows(quote)).accepted is True
    grant = accept_candidate(fact(quote, content="You may ship orders there."), rows(quote))
    assert (grant.accepted, grant.reason) == (False, TRANSACTIONAL)


def test_the_lift_applies_to_profile_updates_too() -> None:
    text = "I'm a Python backend developer."
    update = ProfileUpdate(
        section="work_context",
        content="Python backend developer.",
        scope="user",
        durability="durable",
        authority="transactional",
        confidence=0.9,
        evidence_message_id="u1",
        evidence_text=text,
    )
    decision = accept_candidate(update, rows(text))
    assert decision.accepted is True
    assert isinstance(decision.candidate, ProfileUpdate)
    assert decision.candidate.authority == "descriptive"


def test_other_labels_still_refuse_a_durable_statement() -> None:
    text = DURABLE[4]
    thread = accept_candidate(fact(text, scope="thread"), rows(text))
    assert thread.reason == "thread scope: it belongs to this conversation only"
    temporary = accept_candidate(fact(text, durability="temporary"), rows(text))
    assert temporary.reason == "temporary: it applies only to the current conversation"
    unsure = accept_candidate(fact(text, confidence=0.5), rows(text))
    assert unsure.reason == "low confidence: 0.50 is below 0.70"


# -- evidence ------------------------------------------------------------------------------

ADDRESS = "My office address is 88 Harbour Road, Floor 12, Shenzhen."


@pytest.mark.parametrize(
    ("cited", "quote"),
    [
        ("u1", f"user: {ADDRESS}"),
        ("u1", f"u1: {ADDRESS}"),
        ("u1", f"[u1] user: {ADDRESS}"),
        ("a1", ADDRESS),  # the assistant's id for the user's words
        ("l0_run--01a2", ADDRESS),  # an id copied wrongly
        (UNCITED, ADDRESS),  # no id at all (the line format)
        ("a1", f"u1: {ADDRESS}"),
    ],
)
def test_a_labelled_quote_or_a_wrong_id_cites_the_one_user_message(cited: str, quote: str) -> None:
    decision = accept_candidate(
        fact(quote, authority="descriptive", evidence_message_id=cited), rows(ADDRESS)
    )
    assert decision.accepted is True
    assert decision.candidate is not None
    assert decision.candidate.evidence_message_id == "u1"
    assert decision.candidate.evidence_text == ADDRESS


def test_a_quote_of_the_assistant_or_a_translation_is_refused() -> None:
    conversation = [
        {"id": "u1", "role": "user", "content": ADDRESS},
        {"id": "a1", "role": "assistant", "content": "好的，我记下了您的办公室地址。"},
    ]
    assistant = accept_candidate(
        fact("好的，我记下了您的办公室地址。", authority="descriptive", evidence_message_id="a1"),
        conversation,
    )
    assert assistant.reason == "evidence appears only in an assistant message"
    translated = accept_candidate(
        fact("我的办公室地址是海港路88号", authority="descriptive"), conversation
    )
    assert translated.reason == (
        "evidence not found: '我的办公室地址是海港路88号' is not in user message 'u1' "
        "nor in any other"
    )


def test_a_quote_in_two_user_messages_needs_the_right_id() -> None:
    conversation = [
        {"id": "u1", "role": "user", "content": "My name is Lin."},
        {"id": "u2", "role": "user", "content": "Again: my name is Lin."},
    ]
    wrong = accept_candidate(
        fact("my name is Lin", authority="descriptive", evidence_message_id="a9"), conversation
    )
    assert wrong.reason == (
        "evidence ambiguous: 'my name is Lin' is in 2 user messages and the cited 'a9' is "
        "none of them"
    )
    right = accept_candidate(
        fact("my name is Lin", authority="descriptive", evidence_message_id="u2"), conversation
    )
    assert right.candidate is not None and right.candidate.evidence_message_id == "u2"
