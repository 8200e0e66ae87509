"""The compaction benchmark runs end to end on a tiny session and prints its report."""

from __future__ import annotations

import re

import pytest

from bench.compaction_bench import main
from bench.session import RESULT_TOKENS, USER_WORDS, generate_session
from ctxgraph.state.tokens import count_text

EXPECTED_ROWS = (
    "Main-model requests",
    "Summary-model calls",
    "Compactions committed",
    "Request tokens, median",
    "Request tokens, p95",
    "Request tokens, max",
    "Overhead per main-model call, ms (median of run means)",
    "Overhead per main-model call, ms (p95 of turns, median of runs)",
)


def test_session_is_deterministic_and_in_range() -> None:
    first, second = generate_session(40, seed=3), generate_session(40, seed=3)
    assert first == second
    assert all(USER_WORDS[0] <= len(t.text.split()) <= USER_WORDS[1] for t in first.turns)
    assert first.tool_turns > 0
    low, high = RESULT_TOKENS
    assert all(low <= count_text(text) <= high + 5 for text in first.results.values())


def test_bench_prints_report(database_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["--turns", "20", "--repeats", "1", "--warmup", "2", "--database-uri", database_uri]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "| Metric | ctxgraph | create_agent + SummarizationMiddleware |" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    for row in EXPECTED_ROWS:
        assert row in rows, row
    requests = re.findall(r"[\d,]+", rows["Main-model requests"])
    assert len(requests) >= 2 and requests[0] == requests[1] != "0"
    assert re.search(r"^(PASS|FAIL) overhead per main-model call: ", out, re.MULTILINE)
    assert re.search(r"^(PASS|FAIL) largest request: ctxgraph [\d,]+ tokens", out, re.MULTILINE)
    assert "- overhead per main-model call: " in out
