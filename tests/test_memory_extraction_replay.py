"""Every recorded memory answer of a real 1.5B model, replayed through the extraction ladder.

The answers are Qwen2.5-Coder-1.5B-Instruct's (``../shared/data/real_model/``): never a
real tool call, always the call written as JSON text, with fields left out, wrong ids,
labelled quotes and durable facts labelled ``transactional``. Each is replayed over the
rows of the request it answered (rebuilt from its ``<new_conversation>`` block) into an
empty Store, and what is stored is asserted per answer. At recording time ctxgraph stored
1 fact from the probe's first pass and none from its second pass or from the session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.extraction_replay import (
    DATA,
    RECORDS,
    SOURCES,
    Replay,
    in_group,
    main,
    memory_records,
    replay,
    report,
    rows_of,
    tally,
)

JOB = "I'm a Python backend developer, so I'm usually at my desk during the day."
JOB_KEY = "i_m_a_python_backend_developer_so_i_m_us_d59c615cbe"

STORED: dict[tuple[str, int, int | None], list[tuple[str, str]]] = {
    # the probe's first pass
    ("memory_probe", 1, 1): [("preferred_language", "zh-CN")],  # lifted: "always answer in"
    ("memory_probe", 2, 1): [(JOB_KEY, JOB)],  # no key, content or category: from the quote
    ("memory_probe", 3, 1): [
        ("preferred_short_answers", "I prefer short answers, one or two sentences at most.")
    ],
    ("memory_probe", 4, 1): [],  # the name: quoted from the assistant's greeting
    ("memory_probe", 5, 1): [],  # the address: quoted from the assistant's reply
    ("memory_probe", 6, 1): [],  # Ship B456 …: thread scope
    # the second pass
    ("memory_probe", 1, 2): [("preferred_language", "Chinese")],  # "user:" label, no category
    ("memory_probe", 2, 2): [],  # the job: a translated quote
    ("memory_probe", 3, 2): [  # "u1:" label, cited as a1
        ("preferred_language", "short answers, one or two sentences at most")
    ],
    ("memory_probe", 4, 2): [],
    ("memory_probe", 5, 2): [],
    ("memory_probe", 6, 2): [],  # arguments as a list: temporary, and an assistant quote
    # the session
    ("session", 2, None): [],
    ("session", 4, None): [("preferred_language", "zh")],
    ("session", 6, None): [],
    ("session", 8, None): [],
    ("session", 10, None): [("preferred_language", "Python")],  # the job, mis-keyed: wrong
    ("session", 13, None): [("preferred_language", "short answers")],
    ("session", 18, None): [],
    ("session", 25, None): [],  # the address: thread scope
    ("session", 27, None): [],  # the name: quoted from the assistant
    ("session", 29, None): [],
    ("session", 31, None): [],
    ("session", 33, None): [],  # facts without key or content: the lines were asked for
    ("session", 36, None): [],  # a question answered "English": never stored
    ("session", 38, None): [],
}


def records() -> list[dict[str, Any]]:
    if not DATA.is_dir():
        pytest.skip(f"the recorded real-model outputs are not there ({DATA})")
    return memory_records()


@pytest.fixture(scope="module")
def replays() -> dict[tuple[str, int, int | None], Replay]:
    """Every recorded answer replayed once, by source, seq and probe pass."""
    return {ident(record): replay(record) for record in records()}


def ident(record: dict[str, Any]) -> tuple[str, int, int | None]:
    return record["source"], record["seq"], record.get("probe_pass")


def test_the_rows_are_rebuilt_from_the_recorded_request() -> None:
    probe = next(r for r in records() if r["source"] == "memory_probe")
    assert rows_of(probe) == [
        {"id": "u1", "role": "user", "content": probe["user_turn"]},
        {"id": "a1", "role": "assistant", "content": probe["assistant_turn"]},
    ]


def test_every_recorded_answer_stores_what_its_words_support(
    replays: dict[tuple[str, int, int | None], Replay],
) -> None:
    assert len(replays) == 26
    assert {key: one.stored for key, one in replays.items()} == STORED
    # No answer is unreadable; only the one whose facts all lack key and content gets the
    # ask for lines (whose reply, absent from the recording, is NONE here).
    assert [key for key, one in replays.items() if one.asked_lines] == [("session", 33, None)]
    assert all(one.skipped is None for one in replays.values())


def test_refusals_say_why(replays: dict[tuple[str, int, int | None], Replay]) -> None:
    assert replays[("memory_probe", 5, 2)].rejected == [
        ("preferred_location", "transactional: an authorization or instruction is never remembered")
    ]
    assert replays[("memory_probe", 2, 2)].rejected == [
        (
            "preferred_language",
            "evidence not found: '我是一个Python后端开发人员，所以我通常在白天。' is not in "
            "user message 'a1' nor in any other",
        )
    ]
    assert replays[("session", 27, None)].rejected == [
        ("preferred_name", "evidence appears only in an assistant message")
    ]
    assert replays[("session", 33, None)].rejected == [
        ("facts[0]", "facts[0] missing key, content"),
        ("facts[1]", "facts[1] missing key, content"),
    ]
    assert replays[("memory_probe", 2, 1)].rejected == [
        ("facts[1]", "facts[1] missing key, content")
    ]


def test_planted_and_wrong_facts_per_group(
    replays: dict[tuple[str, int, int | None], Replay],
) -> None:
    counts = {}
    for source, probe_pass in SOURCES:
        group = [one for one in replays.values() if in_group(one.record, source, probe_pass)]
        counts[(source, probe_pass)] = tally(group)
    first, second, session = (counts[group] for group in SOURCES)
    assert sorted(first.planted) == ["answer length", "job", "language"]
    assert (first.misleading, first.wrong, first.before) == (0, 0, 1)
    assert sorted(second.planted) == ["answer length", "language"]
    assert (second.misleading, second.wrong, second.before) == (1, 0, 0)
    assert sorted(session.planted) == ["answer length", "language"]
    assert (session.misleading, session.wrong, session.before) == (1, 1, 0)


def test_the_bench_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    records()
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.strip() == report(memory_records()).strip()
    assert "| probe pass 1 | 6 | 3 (answer length, job, language) | 0 | 0 | 1 | 0 |" in out
    assert "| session | 14 | 2 (answer length, language) | 1 | 1 | 0 | 1 |" in out
    # In one Store, the model's habit of one key for everything leaves the last value.
    assert out.strip().endswith("leave: preferred_language = short answers")


def test_the_bench_says_when_the_data_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--data", str(tmp_path)]) == 2
    assert f"{tmp_path / RECORDS} is missing" in capsys.readouterr().err
