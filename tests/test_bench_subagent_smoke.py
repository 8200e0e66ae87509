"""The subagent benchmark runs end to end in quick mode and prints its side-by-side table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from bench.subagent_bench import search_result
from ctxgraph.state.tokens import count_text
from tests.support.report_table import number, table_rows

ROOT = Path(__file__).resolve().parents[1]

EXPECTED_ROWS = (
    "Parent model calls",
    "Parent largest request, tokens",
    "Parent median request, tokens",
    "Parent input tokens, total",
    "Parent tool schemas per request, tokens (not counted above)",
    "Subagent model calls",
    "Subagent largest request, tokens",
    "Subagent input tokens, total",
    "Parent + subagent input tokens, total",
    "Summary-model calls",
    "Summary-model input tokens",
    "All model input tokens (parent + subagents + summary)",
    "Compactions committed",
    "Searches run",
    "Subagent tasks completed",
    "Wall time, s (median)",
)


def test_search_results_are_deterministic_and_sized() -> None:
    first = search_result("raft leader election: benchmarks", 800)
    assert first == search_result("raft leader election: benchmarks", 800)
    assert first != search_result("raft leader election: overview", 800)
    assert 800 <= count_text(first) <= 1_200


def test_quick_bench_prints_the_table() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "subagent_bench.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "## Subagent benchmark" in out
    assert "| Metric | without delegation | with delegation | with / without |" in out
    rows = table_rows(out)
    for row in EXPECTED_ROWS:
        assert row in rows, row
    # 4 questions of 3 searches: the parent answers each question itself (4 calls each)
    # or delegates it (2 calls each); the subagents make the searches.
    assert [number(c) for c in rows["Parent model calls"][:2]] == [16, 8]
    assert [number(c) for c in rows["Searches run"][:2]] == [12, 12]
    assert number(rows["Subagent model calls"][1]) == 16
    assert rows["Subagent tasks completed"][1] == "4 of 4"
    without, with_ = (number(c) for c in rows["Parent largest request, tokens"][:2])
    assert 0 < with_ < without
    assert re.fullmatch(r"\d+\.\d\d", rows["Parent input tokens, total"][2])
    assert re.search(r"^With delegation, the parent's largest request is \d+\.\d\dx", out, re.M)
