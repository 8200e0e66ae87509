"""``bench.memory_view_eval`` runs offline and shows what relevance selection saves."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import memory_view_eval


def test_the_cost_case_shrinks_the_view_and_no_selection_fills_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = {(row.floor, row.cap): row for row in memory_view_eval.cost_rows()}
    budget_filling = rows[(0, 0)]
    default = rows[(0.25, 12)]
    assert budget_filling.median_tokens > 1_900 and budget_filling.facts > 50
    assert default.facts <= 12 and default.median_tokens < budget_filling.median_tokens / 3

    assert memory_view_eval.main(["--data", str(tmp_path / "missing")]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("cost session: 60 facts, 150 order-lookup messages\n")
    assert "MADial" not in out and "not found" in err
