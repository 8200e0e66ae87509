"""The command line checks thread ids and thread owners before it reads, writes or calls a model."""

from __future__ import annotations

import pytest

from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import run_ctxgraph

BAD_THREAD_IDS = ["a b", "../x", "x" * 300, "", "t1\n", " t1"]


def checkpoints(persistence: Persistence, thread_id: str) -> int:
    config = {"configurable": {"thread_id": thread_id}}
    return len(list(persistence.checkpointer.list(config)))


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("ctxgraph: ")
    return lines[0]


@pytest.mark.parametrize("bad", BAD_THREAD_IDS)
def test_a_bad_thread_id_is_refused_before_anything_runs(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, bad: str
) -> None:
    result = run_ctxgraph(python, subprocess_env, "run", "--user", "alice", "--thread", bad, "hi")
    assert result.returncode == 2, result.stderr
    assert "thread id must be 1-128 characters" in one_error_line(result.stderr)
    assert "assistant:" not in result.stdout
    if bad:
        assert checkpoints(persistence, bad) == 0


def test_threads_show_with_a_bad_id_is_one_line(
    python: str, subprocess_env: dict[str, str]
) -> None:
    result = run_ctxgraph(python, subprocess_env, "threads", "show", "../x")
    assert result.returncode == 2
    assert "thread id must be 1-128 characters" in one_error_line(result.stderr)


def test_another_user_cannot_continue_or_read_a_thread(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, thread_id: str
) -> None:
    first = run_ctxgraph(
        python, subprocess_env, "run", "--user", "alice", "--thread", thread_id, "hi"
    )
    assert first.returncode == 0, first.stderr
    saved = checkpoints(persistence, thread_id)

    intruder = run_ctxgraph(
        python, subprocess_env, "run", "--user", "bob", "--thread", thread_id, "show me"
    )
    assert intruder.returncode == 2
    assert "belongs to another user" in one_error_line(intruder.stderr)
    assert "Noted: hi" not in intruder.stdout  # alice's messages were not shown to bob
    assert checkpoints(persistence, thread_id) == saved

    for command in ("show", "verify"):
        refused = run_ctxgraph(
            python, subprocess_env, "threads", command, thread_id, "--user", "bob"
        )
        assert refused.returncode == 2, refused.stdout
        assert "belongs to another user" in one_error_line(refused.stderr)
        owner = run_ctxgraph(
            python, subprocess_env, "threads", command, thread_id, "--user", "alice"
        )
        assert owner.returncode == 0, owner.stderr
        operator = run_ctxgraph(python, subprocess_env, "threads", command, thread_id)
        assert operator.returncode == 0, operator.stderr
    shown = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id, "--user", "alice")
    assert "Noted: hi" in shown.stdout
