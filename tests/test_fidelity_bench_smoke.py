"""The fidelity benchmark runs quickly offline and prints its per-category tables."""

from __future__ import annotations

import pytest

from bench.fidelity_bench import (
    CATEGORIES,
    PROBES,
    SCRIPTED_MIDDLEWARE,
    TABLE_HEADER,
    main,
    score_probe,
)


def test_quick_run_prints_the_tables(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CTXGRAPH_MODEL", raising=False)
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert TABLE_HEADER in out
    assert f"{TABLE_HEADER} {SCRIPTED_MIDDLEWARE} |" in out  # the middleware column
    for category in CATEGORIES:
        assert f"## {category}" in out
    assert "Degraded records / archived records" in out
    assert "Tokens per main-model request, median" in out
    assert "columns are skipped" in out  # offline: the peer column is skipped with a note


def test_synthetic_filler_when_the_data_is_absent(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.delenv("CTXGRAPH_MODEL", raising=False)
    monkeypatch.setenv("CTXGRAPH_MADIAL_DIR", str(tmp_path))
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "seeded synthetic filler" in out
    assert TABLE_HEADER in out


def test_a_probe_is_scored_request_archive_or_lost() -> None:
    probe = next(p for p in PROBES if p.label == "decision + reason")
    said = "Redis Streams, because ops already runs Redis"
    assert score_probe(probe, said, None, turns=20) == "request"
    assert score_probe(probe, "Redis Streams", lambda needle: True, turns=20) == "archive"
    assert score_probe(probe, "Redis Streams", lambda needle: False, turns=20) == "lost"
    assert score_probe(probe, "", None, turns=probe.turn + 1) == "not yet planted"
