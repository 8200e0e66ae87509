"""Rendering long-term memory into a budgeted prompt block."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import ctxgraph.nodes.memory.render as render_module
from ctxgraph.nodes.memory import MemoryBudgetError, render_memory
from ctxgraph.nodes.memory.render import FACTS_HEADING, MEMORY_HEADER, PROFILE_HEADING
from ctxgraph.state.tokens import count_text
from ctxgraph.store.memory.facts import Fact

PROFILE = {
    "work_context": "Backend engineer working on a LangGraph service in Python.",
    "personal_context": "",
    "top_of_mind": "Preparing the v2 release.",
    "cognitive_style": "",
}


def fact(content, confidence, category="preference", **extra):
    return {"content": content, "category": category, "confidence": confidence, **extra}


def line(content, confidence, category="preference"):
    return f"- [{category}] {content} (confidence {confidence:.2f})"


def record(content, confidence, category="preference", is_correction=False):
    now = datetime(2025, 1, 1, tzinfo=UTC)
    return Fact(
        id=f"id-{content[:8]}",
        key=content[:8],
        content=content,
        category=category,
        confidence=confidence,
        created_at=now,
        confirmed_at=now,
        last_seen_at=now,
        source_thread=None,
        evidence=None,
        scope="user",
        is_correction=is_correction,
    )


FACTS = [
    fact("The user prefers concise answers.", 0.9),
    fact("The user writes tests with pytest.", 0.8, "context"),
    fact("The user wants type hints everywhere.", 0.7, "goal"),
]


def test_exact_rendered_format():
    text = render_memory(PROFILE, FACTS)
    assert text == "\n".join(
        [
            MEMORY_HEADER,
            PROFILE_HEADING,
            "Work context: Backend engineer working on a LangGraph service in Python.",
            "Top of mind: Preparing the v2 release.",
            FACTS_HEADING,
            "- [preference] The user prefers concise answers. (confidence 0.90)",
            "- [context] The user writes tests with pytest. (confidence 0.80)",
            "- [goal] The user wants type hints everywhere. (confidence 0.70)",
        ]
    )


def test_budget_exact_fit_and_one_token_over():
    full = render_memory(PROFILE, FACTS)
    total = count_text(full)
    assert render_memory(PROFILE, FACTS, budget=total) == full
    tighter = render_memory(PROFILE, FACTS, budget=total - 1)
    assert line("The user writes tests with pytest.", 0.8, "context") in tighter
    assert "type hints" not in tighter
    assert tighter == full.rsplit("\n", 1)[0]
    assert count_text(tighter) <= total - 1


def test_line_counting_falls_back_to_whole_text_counts_when_they_disagree(monkeypatch):
    # Line-by-line counting is exact for cl100k; should the tokenizer ever merge across a
    # line break, the selection is redone by counting every assembled prefix.
    full = render_memory(PROFILE, FACTS)
    total = count_text(full)
    expected = render_memory(PROFILE, FACTS, budget=total - 1)
    calls = []

    def undercounting(lines):
        calls.append(len(lines))
        return max(0, sum(count_text(line + "\n") for line in lines) - 5)

    monkeypatch.setattr(render_module, "_joined_tokens", undercounting)
    assert render_memory(PROFILE, FACTS, budget=total - 1) == expected
    assert calls  # the fast path ran, disagreed with the whole-text count, and was redone


def test_oversized_profile_raises_with_advice():
    profile = {"work_context": "word " * 400}
    block = render_memory(profile, [], budget=5000)
    tokens = count_text(block)
    with pytest.raises(MemoryBudgetError) as info:
        render_memory(profile, FACTS, budget=tokens - 3)
    message = str(info.value)
    assert f"3 tokens over a budget of {tokens - 3}" in message
    assert "shorten the profile" in message
    assert "MemoryRepository.update_profile" in message
    assert isinstance(info.value, ValueError)
    assert render_memory(profile, [], budget=tokens) == block


def test_profile_fit_is_checked_without_facts_heading():
    block = render_memory(PROFILE, [])
    assert FACTS_HEADING not in block
    assert render_memory(PROFILE, FACTS, budget=count_text(block)) == block


def test_correction_pool_takes_priority_over_confident_facts():
    correction = fact("The user's name is spelled Zoë, not Zoe.", 0.3, "correction")
    ordinary = [
        fact("The user prefers concise answers.", 0.95),
        fact("The user writes tests with pytest.", 0.9, "context"),
    ]
    expected = render_memory(PROFILE, [correction, ordinary[0]])
    text = render_memory(PROFILE, [*ordinary, correction], budget=count_text(expected))
    assert text == expected
    assert line("The user's name is spelled Zoë, not Zoe.", 0.3, "correction") in text
    assert "pytest" not in text
    lines = text.splitlines()
    assert lines.index(line(correction["content"], 0.3, "correction")) < lines.index(
        line("The user prefers concise answers.", 0.95)
    )


def test_correction_budget_stops_the_correction_queue_only():
    first = fact("Correct: the project uses Postgres.", 0.9, "correction")
    long_one = fact("Correct: " + "the deployment runs in a private cluster " * 6, 0.8)
    long_one["is_correction"] = True
    short_later = fact("Correct: tabs, not spaces.", 0.7, "correction")
    ordinary = fact("The user prefers concise answers.", 0.5)
    first_line = line(first["content"], 0.9, "correction")
    short_line = line(short_later["content"], 0.7, "correction")
    long_line = line(" ".join(long_one["content"].split()), 0.8, "preference, correction")
    correction_budget = count_text(f"{first_line}\n{short_line}")
    assert count_text(f"{first_line}\n{long_line}") > correction_budget
    text = render_memory(
        PROFILE,
        [ordinary, short_later, long_one, first],
        budget=2000,
        correction_budget=correction_budget,
    )
    assert first_line in text
    assert "private cluster" not in text
    assert "tabs" not in text
    assert line(ordinary["content"], 0.5) in text


def test_flagged_correction_keeps_its_category():
    text = render_memory(
        {}, [fact("Lives in Berlin, not Munich.", 0.6, "context", is_correction=True)]
    )
    assert "- [context, correction] Lives in Berlin, not Munich. (confidence 0.60)" in text


def test_fact_that_does_not_fit_stops_the_queue_and_is_never_cut():
    short_first = fact("The user prefers concise answers.", 0.9)
    long_second = fact("The user " + "likes very detailed architecture diagrams " * 8, 0.8)
    short_third = fact("The user uses vim.", 0.7)
    with_third = render_memory(PROFILE, [short_first, short_third])
    with_second = render_memory(PROFILE, [short_first, long_second])
    budget = count_text(with_third)
    assert budget < count_text(with_second)
    text = render_memory(PROFILE, [short_first, long_second, short_third], budget=budget)
    assert "vim" not in text
    assert "diagrams" not in text
    assert text.splitlines()[-1] == line(short_first["content"], 0.9)
    roomy = render_memory(PROFILE, [short_first, long_second, short_third])
    assert " ".join(long_second["content"].split()) in roomy


def test_query_orders_by_relevance_then_confidence():
    related = fact("用户偏好用中文解释技术问题", 0.6)
    unrelated = fact("The user works in the Berlin office.", 0.95, "context")
    other = fact("The user drinks tea.", 0.9, "context")
    facts = [unrelated, other, related]
    with_query = render_memory(None, facts, query="中文").splitlines()
    assert with_query[2] == line(related["content"], 0.6)
    assert with_query[3:] == [
        line(unrelated["content"], 0.95, "context"),
        line(other["content"], 0.9, "context"),
    ]
    plain = render_memory(None, facts).splitlines()
    assert plain[2:] == [
        line(unrelated["content"], 0.95, "context"),
        line(other["content"], 0.9, "context"),
        line(related["content"], 0.6),
    ]
    assert render_memory(None, facts, query="   ") == "\n".join(
        [MEMORY_HEADER, FACTS_HEADING, *plain[2:]]
    )


def test_equal_confidence_keeps_input_order():
    facts = [fact("Alpha fact.", 0.8), fact("Beta fact.", 0.8), fact("Gamma fact.", 0.8)]
    lines = render_memory(None, facts).splitlines()[2:]
    assert lines == [line("Alpha fact.", 0.8), line("Beta fact.", 0.8), line("Gamma fact.", 0.8)]


def test_tool_mode_returns_the_profile_only():
    text = render_memory(PROFILE, FACTS, mode="tool")
    assert text == render_memory(PROFILE, [])
    assert FACTS_HEADING not in text
    for item in FACTS:
        assert item["content"] not in text
    assert render_memory({}, FACTS, mode="tool") == ""


def test_fact_records_and_mappings_both_render():
    records = [
        record("Old name was wrong; it is Zoë.", 0.4, "correction"),
        record("The user prefers dark mode.", 0.8),
    ]
    mixed = [*records, fact("The user writes tests with pytest.", 0.7, "context")]
    text = render_memory(PROFILE, mixed)
    assert text.splitlines()[-3:] == [
        line("Old name was wrong; it is Zoë.", 0.4, "correction"),
        line("The user prefers dark mode.", 0.8),
        line("The user writes tests with pytest.", 0.7, "context"),
    ]


def test_profile_is_text_not_json():
    text = render_memory(PROFILE, [])
    assert "{" not in text and "}" not in text
    assert "Work context: Backend engineer" in text
    assert "Top of mind: Preparing the v2 release." in text
    assert "Personal context" not in text
    assert "Cognitive style" not in text
    assert "work_context" not in text


def test_empty_profile_and_no_facts_render_nothing():
    assert render_memory(None, []) == ""
    assert render_memory({}, []) == ""
    assert render_memory({"work_context": "  ", "top_of_mind": ""}, []) == ""


def test_top_n_caps_the_total_count():
    correction = fact("Correct: the project uses Postgres.", 0.5, "correction")
    facts = [correction, *FACTS]
    text = render_memory(PROFILE, facts, top_n=2)
    fact_lines = [ln for ln in text.splitlines() if ln.startswith("- [")]
    assert fact_lines == [
        line(correction["content"], 0.5, "correction"),
        line("The user prefers concise answers.", 0.9),
    ]
    assert render_memory(PROFILE, facts, top_n=0) == render_memory(PROFILE, [])
    with pytest.raises(ValueError, match="top_n"):
        render_memory(PROFILE, facts, top_n=-1)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"category": "preference", "confidence": 0.9}, "fact 1 is missing 'content'"),
        ({"content": "x", "confidence": 0.9}, "fact 1 is missing 'category'"),
        ({"content": "x", "category": "goal"}, "fact 1 is missing 'confidence'"),
        ({"content": "x", "category": "goal", "confidence": "high"}, "fact 1: 'confidence'"),
        ({"content": "", "category": "goal", "confidence": 0.5}, "fact 1: 'content'"),
    ],
)
def test_malformed_facts_are_rejected(bad, message):
    with pytest.raises(ValueError) as info:
        render_memory(PROFILE, [FACTS[0], bad])
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget": 0}, "budget must be a positive int, got 0"),
        ({"budget": -5}, "budget must be a positive int, got -5"),
        ({"budget": 10.5}, "budget must be a positive int, got 10.5"),
        ({"correction_budget": 0}, "correction_budget must be a positive int, got 0"),
        ({"mode": "inline"}, "'inline'"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError) as info:
        render_memory(PROFILE, FACTS, **kwargs)
    assert message in str(info.value)
