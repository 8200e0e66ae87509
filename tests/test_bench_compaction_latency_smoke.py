"""The background-compaction latency benchmark runs end to end with tiny numbers, in memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import compaction_bench
from bench.compaction_latency import MODES, user_message
from tests.support.report_table import number, table_rows

EXPECTED_ROWS = (
    "Turns",
    "Compactions committed",
    "… applied from a background job",
    "… compacted inline",
    "Background jobs started",
    "… not applied by the last turn",
    "Summary-model calls",
    "Turn latency p50, ms",
    "Turn latency p95, ms",
    "Turn latency max, ms",
    "Compacting turns, latency p50, ms",
    "Compacting turns, latency max, ms",
)


def test_user_messages_are_deterministic_and_sized() -> None:
    first = user_message(7, 3)
    assert first == user_message(7, 3)
    assert first != user_message(7, 4)
    assert first != user_message(8, 3)
    for turn in range(30):
        assert 60 <= len(user_message(7, turn).split()) <= 100


def test_latency_options_need_the_latency_flag() -> None:
    with pytest.raises(SystemExit):
        compaction_bench.parse_args(["--latency-turns", "5"])


def test_quick_latency_bench_prints_the_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "latency.json"
    code = compaction_bench.main(
        [
            "--latency",
            "--latency-turns",
            "20",
            "--repeats",
            "1",
            "--main-delay",
            "0.05",
            "--summary-delay",
            "0.2",
            "--backend",
            "memory",
            "--json",
            str(out_json),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "## Background compaction: turn latency" in out
    assert "Machine: " in out
    assert "| Metric | inline | background | no compaction |" in out
    rows = table_rows(out)
    for row in EXPECTED_ROWS:
        assert row in rows, row
        assert len(rows[row]) == len(MODES)
    assert [number(c) for c in rows["Turns"]] == [20, 20, 20]
    compactions = dict(zip(MODES, (number(c) for c in rows["Compactions committed"]), strict=True))
    calls = dict(zip(MODES, (number(c) for c in rows["Summary-model calls"]), strict=True))
    assert compactions["background"] >= 1
    assert compactions["no compaction"] == 0 and calls["no compaction"] == 0
    assert calls["inline"] == compactions["inline"]
    # Every background compaction came from a job, and each job made one summary call: a
    # job started near the end, whose result no trigger needed yet, is the only extra call.
    assert number(rows["… applied from a background job"][1]) == compactions["background"]
    assert number(rows["… compacted inline"][1]) == 0
    pending = number(rows["… not applied by the last turn"][1])
    assert calls["background"] == compactions["background"] + pending
    assert calls["background"] == number(rows["Background jobs started"][1])
    assert "- background p95 / no-compaction p95: " in out
    assert "- inline p95 / no-compaction p95: " in out
    assert "- background max / inline max: " in out
    assert "background p95 turn latency: " in out
    assert ("PASS background p95" in out) or ("FAIL background p95" in out)
    document = json.loads(out_json.read_text(encoding="utf-8"))
    assert {run["mode"] for run in document["runs"]} == set(MODES)
    assert all(len(run["turns"]) == 20 for run in document["runs"])
