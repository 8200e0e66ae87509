"""The retrieval evaluation's metrics and data handling, on a small dataset of the same shape."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.embeddings import Embeddings

from bench.retrieval_eval import (
    PUBLISHED,
    Dialogue,
    ctxgraph_rankings,
    embedding_rows,
    embedding_table,
    load_dialogues,
    load_memories,
    main,
    published_rankings,
    score,
)


def write_lines(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    memories = {
        1: ("Bart在圣诞节晚会上跳舞，感觉非常开心。", 1),
        2: ("Bart在海边放风筝，感到非常开心。", 1),
        3: ("Lisa和家人一起装饰圣诞树，感到非常开心。", 2),
    }
    write_lines(
        tmp_path / "MADial-Bench-zh-memory.json",
        [
            {str(i): {"time": "2023-12-25", "event": text, "user-id": user, "id": str(i)}}
            for i, (text, user) in memories.items()
        ],
    )
    dialogue = [
        "<BOD>\n",
        '<Bart>:"今天我去海边了！"\n',
        '<Assistant>:"真好！"\n',
        '<Bart>:"我想放风筝。"\n',
        '<Assistant>:"记得你在海边放风筝吗？"\n',
        "<EOD>\n",
    ]
    write_lines(
        tmp_path / "MADial-Bench-zh-dialogue.json",
        [{"dialogue": dialogue, "test-turn": [4], "relevant-id": [2], "user-id": 1, "id": 0}],
    )
    (tmp_path / "published_top20").mkdir()
    write_lines(
        tmp_path / "published_top20" / "openai_zh_top_20_ids.json",
        [{"id": 0, "user-id": 1, "top_20_ids": [1, 2], "relevant_id": [2]}],
    )
    return tmp_path


REPO_ROOT = Path(__file__).resolve().parent.parent


def add_all_published_lists(data: Path) -> None:
    """Copy the OpenAI list under every published retriever's file name."""
    source = data / "published_top20" / "openai_zh_top_20_ids.json"
    for filename in PUBLISHED.values():
        target = data / "published_top20" / filename
        if target != source:
            target.write_text(source.read_text("utf-8"), "utf-8")


def test_recall_and_mrr_follow_the_published_definitions() -> None:
    dialogues = [
        Dialogue(0, 1, "q", frozenset({1, 2})),
        Dialogue(1, 1, "q", frozenset({9})),
    ]
    rankings = {0: [5, 2, 6, 7, 8, 1], 1: [1, 2, 3, 4, 5, 6, 7, 8, 9]}
    result = score(rankings, dialogues)
    # Dialogue 0: one of two gold ids in the top 5, both in the top 10, first hit at rank 2.
    # Dialogue 1: the gold id is at rank 9.
    assert result.recall_at_5 == pytest.approx((0.5 + 0.0) / 2)
    assert result.recall_at_10 == pytest.approx((1.0 + 1.0) / 2)
    assert result.mrr_at_10 == pytest.approx((1 / 2 + 1 / 9) / 2)


def test_the_query_is_the_dialogue_before_the_first_test_turn(data: Path) -> None:
    [dialogue] = load_dialogues(data)
    assert (
        dialogue.query
        == '<BOD>\n<Bart>:"今天我去海边了！"\n<Assistant>:"真好！"\n<Bart>:"我想放风筝。"\n'
    )
    assert "记得" not in dialogue.query  # the recalling turn itself is not part of it
    assert dialogue.gold == frozenset({2}) and dialogue.user == 1


def test_ctxgraph_ranks_through_the_public_api_per_user(data: Path) -> None:
    memories = load_memories(data)
    rankings, median_ms = ctxgraph_rankings(memories, load_dialogues(data), event_dates=False)
    # The kite memory first; the other one shares only the name. Lisa's memory (user 2) is
    # never a candidate for Bart.
    assert rankings == {0: [2, 1]}
    assert median_ms >= 0
    assert published_rankings(data, "openai_zh_top_20_ids.json") == {0: [1, 2]}


def test_main_prints_the_table_side_by_side(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The published files other than OpenAI's are absent here; main needs all of them.
    add_all_published_lists(data)
    assert main(["--data", str(data)]) == 0  # 1.0 / 1.0 on this one-dialogue set
    out = capsys.readouterr().out
    assert "ctxgraph BM25 (jieba) + rerank           1.000      1.000   1.000" in out
    assert "published: OpenAI embeddings             1.000      1.000   0.500" in out
    assert "PASS" in out


def test_a_missing_data_folder_is_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder"
    finished = subprocess.run(
        [sys.executable, "-m", "bench.retrieval_eval", "--data", str(missing)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 2, finished.stderr
    assert finished.stdout == ""
    lines = finished.stderr.splitlines()
    assert len(lines) == 1, finished.stderr
    assert str(missing) in lines[0]
    assert "--data" in lines[0]
    assert "Traceback" not in finished.stderr


def test_a_missing_file_is_named(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Only the OpenAI list is there; the first other published list is reported.
    assert main(["--data", str(data)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert str(data / "published_top20" / "Stella_zh_top_20_ids.json") in line


def test_a_madial_bench_checkout_is_read_in_place(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_all_published_lists(data)
    checkout = tmp_path / "MADial-Bench"
    (checkout / "data" / "ch").mkdir(parents=True)
    for name in ("MADial-Bench-zh-memory.json", "MADial-Bench-zh-dialogue.json"):
        shutil.copy(data / name, checkout / "data" / "ch" / name)
    shutil.copytree(data / "published_top20", checkout / "embeddings" / "ch")

    assert main(["--data", str(checkout)]) == 0
    out = capsys.readouterr().out
    assert "MADial-Bench zh: 3 memories, 1 dialogues" in out
    assert "published: OpenAI embeddings             1.000      1.000   0.500" in out


class KiteEmbeddings(Embeddings):
    """Deterministic: one dimension for kites, one for Christmas, one constant."""

    def __init__(self) -> None:
        self.calls = 0

    def _vector(self, text: str) -> list[float]:
        return [float("风筝" in text), float("圣诞" in text), 0.5]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls += 1
        return self._vector(text)


def test_the_embeddings_table_compares_three_modes_without_a_network(data: Path) -> None:
    memories = load_memories(data)
    dialogues = load_dialogues(data)
    index = {"dims": 3, "embed": KiteEmbeddings(), "fields": ["content"]}
    rows = embedding_rows(memories, dialogues, index)
    assert [(row.mode, row.dated) for row in rows] == [
        (mode, dated) for mode in ("lexical", "hybrid", "dense-only") for dated in (False, True)
    ]
    for row in rows:
        assert row.run.rankings[0][0] == 2  # the kite memory first, in every mode
        expected = 0.0 if row.mode == "lexical" else 1.0  # one query embedding per search
        assert row.run.calls_per_search == expected
    passed, lines = embedding_table(rows)
    assert passed
    assert lines[0].split() == [
        "mode",
        "facts",
        "r@5",
        "MRR@10",
        "p50",
        "ms",
        "embedding",
        "calls/search",
    ]
    assert lines[3].startswith("hybrid      undated   1.000   1.000")
    assert lines[-1].endswith("PASS")


def test_embeddings_without_an_embedding_model_is_one_line(
    data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CTXGRAPH_EMBEDDING_MODEL", raising=False)
    assert main(["--data", str(data), "--embeddings"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "CTXGRAPH_EMBEDDING_MODEL" in line
