"""The CLI start-up benchmark runs each command once on the session database and reports."""

from __future__ import annotations

import re

import pytest

from bench.cli_startup import main

TARGETS = {
    "ctxgraph threads show (one-turn thread)": "1",
    "ctxgraph threads verify (one-turn thread)": "1",
    "ctxgraph memory list": "1",
    "ctxgraph memory search": "1",
    "ctxgraph memory export": "1",
    "ctxgraph skills list (one skill)": "0.5",
    "ctxgraph skills show (one skill)": "0.5",
}
"""The read-only commands and their targets in seconds."""

ROWS = (
    'python -c "import langgraph" (baseline)',
    "ctxgraph --help",
    *TARGETS,
    "ctxgraph run (one turn, scripted model)",
)


def test_bench_prints_every_command_and_a_verdict(
    database_uri: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URI", database_uri)
    code = main(["--repeats", "1"])
    out = capsys.readouterr().out
    assert "# CLI start-up (1 interleaved runs per command, median wall time)" in out
    assert "Postgres: DATABASE_URI." in out
    for row in ROWS:
        match = re.search(
            rf"^\| {re.escape(row)} \| ([\d,]+) ms \| [\d,]+ ms \| [\d,]+ ms \| (\d+\.\d\d)x \|$",
            out,
            re.MULTILINE,
        )
        assert match, row
        assert int(match.group(1).replace(",", "")) > 0
    assert re.search(r"^\| python -c .* \| 1\.00x \|$", out, re.MULTILINE)
    verdict = re.search(
        r"^(PASS|FAIL) ctxgraph --help within 1\.5x the baseline: [\d,]+ ms vs [\d,]+ ms "
        r"\((\d+\.\d\d)x\)$",
        out,
        re.MULTILINE,
    )
    assert verdict, out
    if verdict.group(2) != "1.50":  # rounded; either verdict is possible at exactly 1.50
        assert (verdict.group(1) == "PASS") == (float(verdict.group(2)) < 1.5)
    verdicts = [verdict.group(1) == "PASS"]
    for row, target in TARGETS.items():
        met = re.search(
            rf"^(PASS|MISS) {re.escape(row)} within {re.escape(target)} s: ([\d,]+) ms$",
            out,
            re.MULTILINE,
        )
        assert met, (row, out)
        median_ms = int(met.group(2).replace(",", ""))
        if abs(median_ms - float(target) * 1000) > 1:  # rounded to the millisecond
            assert (met.group(1) == "PASS") == (median_ms < float(target) * 1000), met.group(0)
        verdicts.append(met.group(1) == "PASS")
    assert code == (0 if all(verdicts) else 1)


def test_repeats_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--repeats", "0"])
    assert "--repeats must be at least 1" in capsys.readouterr().err
