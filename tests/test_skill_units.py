"""The pieces behind skills that need no graph: the record's reducer, slash parsing, cutting."""

from __future__ import annotations

from typing import Any

import pytest

from ctxgraph.nodes.skills.active import cut_to_tokens
from ctxgraph.nodes.skills.listing import cut_description, render_listing
from ctxgraph.nodes.skills.policy import ALWAYS_ALLOWED, tool_policy
from ctxgraph.nodes.skills.slash import SlashCommand, parse_slash
from ctxgraph.state.skill_context import merge_skill_context
from ctxgraph.state.tokens import count_text
from ctxgraph.store.skills import EMPTY_SNAPSHOT, Skill, SkillSnapshot


def entry(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "path": f"/skills/{name}/SKILL.md",
        "description": "d",
        "sha256": "0" * 64,
        "loaded_at": "2026-12-01T00:00:00+00:00",
        "source": "load_skill",
        "allowed_tools": None,
        **extra,
    }


def skill(name: str, allowed: tuple[str, ...] | None = None) -> Skill:
    return Skill(
        name=name,
        description=f"About {name}.",
        allowed_tools=allowed,
        body="body",
        path=f"/skills/{name}/SKILL.md",
        sha256="1" * 64,
        source="dir",
    )


def names(entries: list[Any]) -> list[str]:
    return [e["name"] for e in entries]


def test_reducer_dedupes_by_path_keeps_the_newest_last_and_caps() -> None:
    record = merge_skill_context(None, [entry(f"s{n}") for n in range(3)])
    record = merge_skill_context(record, [entry("s0", sha256="2" * 64)])
    assert names(record) == ["s1", "s2", "s0"]
    assert record[-1]["sha256"] == "2" * 64
    record = merge_skill_context(record, {"entries": [entry("s3")], "max_active": 2})
    assert names(record) == ["s0", "s3"]
    assert names(merge_skill_context(None, [entry(f"x{n}") for n in range(10)])) == [
        f"x{n}" for n in range(2, 10)
    ]
    assert merge_skill_context(record, None) == record


@pytest.mark.parametrize(
    "update",
    [[{"name": "no-path"}], {"entries": [entry("a")], "max_active": 0}],
)
def test_reducer_rejects_malformed_updates(update: Any) -> None:
    with pytest.raises(ValueError, match=r"path|max_active"):
        merge_skill_context(None, update)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/reader compare a and b", SlashCommand("reader", "compare a and b")),
        ("  /reader", SlashCommand("reader", "")),
        ("/a-b-2\nmore", SlashCommand("a-b-2", "more")),
        ("/help", None),
        ("/memory show", None),
        ("/usr/bin is here", None),
        ("/Reader x", None),
        ("/-x", None),
        ("please /reader", None),
        ("/" + "a" * 65, None),
    ],
)
def test_parse_slash(text: str, expected: SlashCommand | None) -> None:
    assert parse_slash(text) == expected


def test_policy_union_slash_dominance_and_failing_closed() -> None:
    snapshot = SkillSnapshot.of([skill("r", ("read_file",)), skill("w", ("write_file",))])
    assert tool_policy([], None, snapshot).allowed is None
    assert tool_policy([entry("free")], None, snapshot).allowed is None
    union = tool_policy(
        [entry("r", allowed_tools=["read_file"]), entry("w", allowed_tools=["write_file"])],
        None,
        snapshot,
    )
    assert union.allowed == ALWAYS_ALLOWED | {"read_file", "write_file"}
    slash = tool_policy(
        [entry("w", allowed_tools=["write_file"])], skill("r", ("read_file",)), snapshot
    )
    assert slash.allowed == ALWAYS_ALLOWED | {"read_file"}
    assert tool_policy([], skill("open"), snapshot).allowed is None
    empty = tool_policy([entry("none", allowed_tools=[])], None, snapshot)
    assert empty.allowed == ALWAYS_ALLOWED
    unreadable = SkillSnapshot.of([], readable=False)
    assert tool_policy([], None, unreadable).allowed == ALWAYS_ALLOWED


def test_cuts_respect_their_limits() -> None:
    assert cut_description("one  two\nthree", 250) == "one two three"
    cut = cut_description("word " * 100, 60)
    assert len(cut) <= 60 and cut.endswith("…")
    text = "\n".join(f"line {n} of a long body" for n in range(500))
    prefix, was_cut = cut_to_tokens(text, 100, count_text)
    assert was_cut and count_text(prefix) <= 100 and text.startswith(prefix)
    assert cut_to_tokens("short", 100, count_text) == ("short", False)


def test_listing_is_empty_without_skills_and_deterministic() -> None:
    assert render_listing(EMPTY_SNAPSHOT.skills, 2_000, count_text) == ""
    skills = [skill(f"s{n}") for n in range(5)]
    assert render_listing(skills, 2_000, count_text) == render_listing(skills, 2_000, count_text)
