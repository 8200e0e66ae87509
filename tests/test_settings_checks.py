"""The rule tables of ``state.settings_checks`` cover every setting and say what would work."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, get_args, get_type_hints

import pytest

from ctxgraph.state.settings import Settings, SettingsError
from ctxgraph.state.settings_checks import (
    RULES,
    Choice,
    Names,
    Number,
    Rule,
    WholeNumber,
    check_settings,
)

FIELD_RULES = (WholeNumber, Number, Choice, Names)
"""Rule kinds that name the one setting they check and take a value from the message."""

FUNCTION_RULES = {"tool_offload_thresholds": {"offload_tool_tokens"}}
"""Rules written as functions that check one setting each (the others relate settings)."""


def all_rules() -> list[Rule]:
    return [rule for rules in RULES.values() for rule in rules]


def checked_fields() -> list[str]:
    """The settings the rules name, once per rule that checks it alone."""
    names: list[str] = []
    for rule in all_rules():
        name = getattr(rule, "name", None)
        if isinstance(name, str):
            names.append(name)
        else:
            names += sorted(FUNCTION_RULES.get(getattr(rule, "__name__", ""), set()))
    return names


def test_every_setting_has_exactly_one_rule() -> None:
    names = checked_fields()
    assert sorted(names) == sorted(f.name for f in fields(Settings))


def test_choices_are_the_values_of_the_fields_literal_types() -> None:
    hints = get_type_hints(Settings)
    for rule in all_rules():
        if isinstance(rule, Choice):
            assert rule.choices == get_args(hints[rule.name]), rule.name


@pytest.mark.parametrize(
    "rule",
    [rule for rule in all_rules() if isinstance(rule, WholeNumber | Number)],
    ids=lambda rule: rule.name,
)
def test_a_number_outside_its_range_names_the_setting_and_a_value_that_works(
    rule: WholeNumber | Number,
) -> None:
    bad: float = -1 if isinstance(rule, WholeNumber) else math.nan
    with pytest.raises(SettingsError) as raised:
        Settings(**{rule.name: bad})
    message = str(raised.value)
    assert message.startswith(f"Settings.{rule.name} must be "), message
    assert message.endswith(f"got {bad!r}")
    if rule.optional:
        assert "or None" in message
        Settings(**{rule.name: None})
    if "for example " in message:
        shown = message.split("for example ")[1].split(")")[0].split(",")[0]
        suggested: dict[str, Any] = {rule.name: float(shown) if "." in shown else int(shown)}
        Settings(**suggested)
    with pytest.raises(SettingsError, match=f"Settings.{rule.name} "):
        Settings(**{rule.name: True})  # a bool is not a number here


@pytest.mark.parametrize(
    ("rule", "shown"),
    [
        (Number("x", 0, 1, low_open=True), "a number in (0, 1]"),
        (Number("x", 0.3, 1), "a number from 0.3 to 1"),
        (Number("x", 0, 1, low_open=True, high_open=True), "a number between 0 and 1 (both "),
        (Number("x", 0, 1, high_open=True), "a number in [0, 1)"),
        (Number("x", 0, unit="seconds", example=10), "a number of seconds, 0 or more, for "),
        (Number("x", 1, unit="seconds"), "a number of seconds, at least 1, got"),
        (Number("x", 0, low_open=True), "a number above 0, got"),
        (Number("x", 0, 1, example=0.8, optional=True), "0 to 1, for example 0.8, or None, "),
    ],
)
def test_number_bounds_in_words(rule: Number, shown: str) -> None:
    assert shown in rule.message("v")


def test_whole_number_relative_to_another_setting_suggests_a_value_that_works() -> None:
    rule = WholeNumber("trigger_messages", 2, 60, relative_to="keep_messages")
    rule(Settings(keep_messages=100, trigger_messages=102))  # the least value itself works
    with pytest.raises(SettingsError, match=r"at least 102 \(for example 102\), got 60"):
        Settings(keep_messages=100, trigger_messages=60)


def test_choice_lists_every_choice() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings(memory_extraction="later")  # type: ignore[arg-type]
    assert str(raised.value) == (
        "Settings.memory_extraction must be 'background', 'inline', 'deferred' or 'off', "
        "got 'later'"
    )


def test_json_values_are_converted_before_they_are_checked() -> None:
    settings = Settings(
        skills_dirs="./a: :./b",  # type: ignore[arg-type]
        skills_disabled=["x"],  # type: ignore[arg-type]
        offload_tool_tokens={"b": 1, "a": 0},  # type: ignore[arg-type]
    )
    assert settings.skills_dirs == ("./a", "./b")
    assert settings.skills_disabled == ("x",)
    assert settings.offload_tool_tokens == (("a", 0), ("b", 1))
    assert Settings(offload_tool_tokens=[["t", 5]]).offload_tool_tokens == (("t", 5),)  # type: ignore[list-item]
    with pytest.raises(SettingsError, match=r"read_only_tools must be a tuple of tool names"):
        Settings(read_only_tools=["x"])  # type: ignore[arg-type]
    with pytest.raises(SettingsError, match=r"skills_dirs .* got \('', 'a'\)"):
        Settings(skills_dirs=["", "a"])  # type: ignore[arg-type]


def test_rules_run_in_table_order() -> None:
    # Both are wrong; keep_messages comes first in the compaction rules.
    with pytest.raises(SettingsError, match="keep_messages"):
        Settings(keep_messages=0, subagent_max_depth=0)
    with pytest.raises(SettingsError, match="summary_max_tokens"):
        Settings(summary_max_tokens=20_000, skill_policy="maybe")  # type: ignore[arg-type]


def test_check_settings_accepts_the_defaults() -> None:
    check_settings(Settings())
    assert isinstance(Names("n", "names"), Names)
