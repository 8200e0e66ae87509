"""The compaction benchmark runs end to end on a tiny session and prints its report."""

from __future__ import annotations

import re

import pytest
from langchain_core.messages import HumanMessage

from bench.compaction_bench import main
from bench.session import RESULT_TOKENS, STANDING_CONSTRAINT, USER_WORDS, generate_session
from ctxgraph.nodes.compaction.ledger import constraint_key, derive_ledger
from ctxgraph.state.identifiers import is_constraint, split_sentences
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


def test_constraint_session_adds_a_constraint_to_every_user_message() -> None:
    plain = generate_session(300, seed=3)
    said = generate_session(300, seed=3, constraints=True)
    assert said == generate_session(300, seed=3, constraints=True)
    assert [t.plan for t in said.turns] == [t.plan for t in plain.turns]
    ledger = derive_ledger([HumanMessage(turn.text) for turn in said.turns])
    for before, after in zip(plain.turns, said.turns, strict=True):
        # The same message, then the constraint sentences.
        assert after.text.startswith(before.text + " ")
        last = split_sentences(after.text)[-1]
        assert is_constraint(last) and STANDING_CONSTRAINT in last
    # Worded differently from turn to turn, and still one constraint.
    wordings = {split_sentences(t.text)[-1] for t in said.turns}
    assert len(wordings) > 50  # some name an order: each of those is a new constraint
    standing = [
        c for c in ledger["constraints"] if constraint_key(c["text"]) == STANDING_CONSTRAINT
    ]
    assert len(standing) == 1 and standing[0]["count"] > 150
    assert len(said.constraints) > 5
    assert all(any(c in t.text for t in said.turns) for c in said.constraints)


def test_bench_constraint_mode_reports_input_tokens_and_record_size(
    database_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "--turns",
            "16",
            "--repeats",
            "1",
            "--warmup",
            "1",
            "--constraint-every-turn",
            "--database-uri",
            database_uri,
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert f'Every user message ends with a constraint ("{STANDING_CONSTRAINT}"' in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    for row in (
        "Input tokens per turn, all model calls",
        "Memory-model calls",
        "Request messages, max",
    ):
        assert row in rows, row
    assert re.search(r"^\| 16 \| [\d,]+ \| [\d,]+ \| [\d,]+ \|$", out, re.MULTILINE)
    assert re.search(
        r"^(PASS|FAIL) input tokens per turn, all model calls: ctxgraph [\d,]+ / peer [\d,]+ = "
        r"[\d.]+x \(target <= 2\.0x, goal 1\.0x\)$",
        out,
        re.MULTILINE,
    )
    assert re.search(r"^(PASS|FAIL) record size: at turn 16 ", out, re.MULTILINE)
