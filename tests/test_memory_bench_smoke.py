"""The memory-filter benchmark runs on a few turns and prints its report."""

from __future__ import annotations

import re

import pytest

from bench.memory_bench import generate_turns, main, measure
from ctxgraph.state.messages import is_real_user_message

EXPECTED_ROWS = (
    "Tokens per turn, median",
    "Tokens per turn, p95",
    "Tokens, total",
    "Ratio filtered/raw",
    "Turns skipped (no user content, no model call)",
    "Turns leaking tool/upload/memory text",
)


def test_session_is_deterministic() -> None:
    first, second = generate_turns(8, seed=3), generate_turns(8, seed=3)
    assert [[m.model_dump() for m in t] for t in first] == [
        [m.model_dump() for m in t] for t in second
    ]
    assert all(sum(is_real_user_message(m) for m in turn) == 1 for turn in first)


def test_bench_prints_report(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--turns", "8", "--seed", "3"])
    out = capsys.readouterr().out
    assert code == 0
    assert "| Metric | Raw turn | Filtered |" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    for row in EXPECTED_ROWS:
        assert row in rows, row
    assert re.search(r"^Ratio filtered/raw: 0\.\d{4}$", out, re.MULTILINE)
    assert re.search(r"^PASS filtered <= 30% of raw: ", out, re.MULTILINE)


def test_filtered_turn_is_smaller_than_raw() -> None:
    for turn in generate_turns(8, seed=11):
        result = measure(turn)
        assert not result.leaked
        assert result.filtered < result.raw
