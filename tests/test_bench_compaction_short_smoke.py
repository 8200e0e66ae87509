"""The short-message compaction benchmark runs end to end with tiny numbers, in memory."""

from __future__ import annotations

import pytest

from bench import compaction_bench
from bench.compaction_short import MODES, user_message
from tests.support.report_table import number, table_rows

COUNTS = (
    "Compactions committed",
    "Summary calls inline (a turn waited)",
    "Summary calls in background jobs",
    "Job results applied",
    "Job results discarded",
    "Compactions refused after their summary call",
    "Compactions skipped before a summary call",
)


def test_user_messages_are_short_and_deterministic() -> None:
    assert user_message(12) == user_message(12)
    assert user_message(12) != user_message(13)
    assert all(len(user_message(turn).split()) <= 6 for turn in range(40))


def test_short_message_options_come_with_the_flag() -> None:
    with pytest.raises(SystemExit):
        compaction_bench.parse_args(["--short-messages"])


def test_quick_short_message_bench_counts_where_the_summaries_ran(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = compaction_bench.main(
        [
            "--short-messages",
            "--turns",
            "16",
            "--repeats",
            "1",
            "--main-delay",
            "0.02",
            "--summary-delay",
            "0.05",
            "--backend",
            "memory",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "## Short messages at a message trigger: turn latency" in out
    assert "| Metric | background | inline |" in out
    rows = table_rows(out)
    assert all(len(cells) == len(MODES) for cells in rows.values())
    background, inline = ({label: number(rows[label][i]) for label in COUNTS} for i in (0, 1))
    # The record is larger than the short messages it folds, and every compaction commits
    # all the same: the background jobs' results are applied and no turn summarizes inline.
    assert background["Summary calls inline (a turn waited)"] == 0
    assert background["Job results discarded"] == 0
    assert background["Compactions refused after their summary call"] == 0
    assert background["Job results applied"] == background["Compactions committed"] >= 1
    assert inline["Summary calls inline (a turn waited)"] == inline["Compactions committed"] >= 1
    assert inline["Compactions refused after their summary call"] == 0
    assert ("PASS background mode" in out) or ("FAIL background mode" in out)
