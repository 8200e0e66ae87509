"""The search-speed benchmark runs end to end on a small namespace and prints its table."""

from __future__ import annotations

import re

import pytest

from bench.search_speed import main


def test_bench_prints_every_measurement_for_a_small_size(
    database_uri: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URI", database_uri)
    assert main(["--sizes", "300", "--queries", "20", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "## 300 facts" in out
    for row in (
        "memory_search, repository (top_k=5)",
        "memory_search, tool function (limit=5)",
        "load_memory (auto mode)",
        "Index cold build (first search, caches cleared)",
        "Index refresh (next search after add_fact)",
    ):
        assert re.search(rf"^\| {re.escape(row)} \| \d[\d,.]* ms \|", out, re.MULTILINE), row
    assert re.search(r"of a 2,000-token budget \(within\)", out)
    assert "NOT JUDGED repository search p50: size 10,000 was not run" in out
