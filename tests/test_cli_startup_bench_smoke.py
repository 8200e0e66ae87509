"""The CLI start-up benchmark runs each command once on the session database and reports."""

from __future__ import annotations

import re

import pytest

from bench.cli_startup import main

ROWS = (
    'python -c "import langgraph" (baseline)',
    "ctxgraph --help",
    "ctxgraph threads show (one-turn thread)",
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
    assert code == (0 if verdict.group(1) == "PASS" else 1)


def test_repeats_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--repeats", "0"])
    assert "--repeats must be at least 1" in capsys.readouterr().err
