"""The memory benchmark's extraction section: the gate loses no expected fact."""

from __future__ import annotations

import re

import pytest

from bench.memory_bench import expected_fact, generate_turns, main, measure_extraction


def test_no_turn_stating_a_fact_is_gated() -> None:
    turns = generate_turns(30, seed=5)
    cost = measure_extraction(turns, seed=5)
    assert cost.facts == sum(expected_fact(turn) is not None for turn in turns) > 0
    assert cost.facts_gated == 0
    assert cost.schema_after < cost.schema_before
    assert len(cost.after) == cost.with_user_text - cost.gated
    assert sum(cost.after) < sum(cost.before)


def test_the_report_prints_the_extraction_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--turns", "8", "--seed", "3", "--extraction"]) == 0
    out = capsys.readouterr().out
    assert "## Extraction cost (8 turns" in out
    assert re.search(r"^\| MemoryUpdate schema tokens \| 1,\d{3} \| \d{3} \|$", out, re.MULTILINE)
    assert re.search(r"^PASS no expected fact gated: 0 of \d+$", out, re.MULTILINE)
