"""The compaction benchmark with ctxgraph's memory on, on the in-memory saver and store."""

from __future__ import annotations

import re

import pytest

from bench.compaction_bench import main


def test_bench_memory_on_in_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "--turns",
            "12",
            "--repeats",
            "1",
            "--warmup",
            "1",
            "--memory",
            "on",
            "--backend",
            "memory",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "ctxgraph's long-term memory: on (memory_mode='auto'" in out
    assert "in-memory checkpointer (InMemorySaver) and Store (InMemoryStore)" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    calls = re.findall(r"[\d,]+", rows["Memory-model calls"])
    assert int(calls[0]) == 12 and calls[1] == "0"  # one extraction per turn, none for the peer
    assert re.search(r"^(PASS|FAIL) overhead per main-model call: ", out, re.MULTILINE)
    assert "summary and memory models" in out
