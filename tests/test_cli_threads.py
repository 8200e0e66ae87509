"""``ctxgraph threads show`` and ``threads verify`` on a thread that has compacted."""

from __future__ import annotations

import re

from ctxgraph.store.namespaces import thread_archive
from ctxgraph.store.persistence.archive import ThreadArchive, version_key
from ctxgraph.store.persistence.connection import open_persistence
from tests.support.cli import run_ctxgraph

FILLER = (
    "The warehouse packed the crates at the north dock, the carrier confirmed the pickup "
    "window for the morning, and the customs broker asked for the signed invoice before "
    "the container leaves the yard; keep the pallet count, the seal number and the "
    "delivery address exactly as written in the booking, and call the driver when the "
    "truck is loaded."
)
"""About seventy words, so each compaction saves more than its summary and the newly
bound ``read_history`` schema add, and commits with the ledger's full bounds."""
TURNS = [f"Note {n}: order A-{1000 + n} ships on 2026-09-{n + 10:02d}. {FILLER}" for n in range(14)]


def compacted_thread(python: str, env: dict[str, str], thread: str) -> dict[str, str]:
    env = {**env, "CTXGRAPH_TRIGGER_MESSAGES": "10", "CTXGRAPH_KEEP_MESSAGES": "4"}
    result = run_ctxgraph(python, env, "run", "--user", "u1", "--thread", thread, *TURNS)
    assert result.returncode == 0, result.stderr
    return env


def test_show_prints_archive_and_window_with_compaction_markers(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    env = compacted_thread(python, subprocess_env, thread_id)
    shown = run_ctxgraph(python, env, "threads", "show", thread_id, "--summary")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    header = re.search(r"thread \S+: (\d+) messages \((\d+) archived in (\d+) compactions", out)
    assert header, out
    assert int(header.group(1)) == 2 * len(TURNS)
    assert int(header.group(3)) >= 2
    # Every user turn is in the transcript exactly once, archived or in the window.
    for turn in TURNS:
        assert out.count(f"user: {turn}") == 1, turn
    assert "──── compaction v1:" in out
    assert "current summary (v" in out and "SESSION INTENT" in out
    # The ledger follows the summary: identifiers of the folded turns, recorded by code.
    ledger = out[out.index("\nledger (recorded by code") :]
    identifiers = re.search(r"^IDENTIFIERS: (.*)$", ledger, re.MULTILINE)
    assert identifiers, ledger
    assert "A-1000" in identifiers.group(1).split(", ")
    assert "2026-09-10" in identifiers.group(1).split(", ")

    plain = run_ctxgraph(python, env, "threads", "show", thread_id)
    assert plain.returncode == 0, plain.stderr
    assert "current summary" not in plain.stdout and "IDENTIFIERS" not in plain.stdout
    assert plain.stdout == out[: out.index("\ncurrent summary (v")]


def test_show_summary_of_a_thread_without_compaction(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    created = run_ctxgraph(
        python, subprocess_env, "run", "--user", "u1", "--thread", thread_id, "What is 2 * 21?"
    )
    assert created.returncode == 0, created.stderr
    shown = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id, "--summary")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"thread {thread_id}: 4 messages\n[1] user: What is 2 * 21?")
    assert shown.stdout.endswith("\nno summary yet: the thread has not been compacted\n")


def test_verify_passes_then_names_the_tampered_version(
    python: str, subprocess_env: dict[str, str], thread_id: str, database_uri: str
) -> None:
    env = compacted_thread(python, subprocess_env, thread_id)
    intact = run_ctxgraph(python, env, "threads", "verify", thread_id)
    assert intact.returncode == 0, intact.stderr
    assert re.search(r"intact \(\d+ compaction versions? verified", intact.stdout)

    with open_persistence(database_uri) as persistence:
        record = ThreadArchive(persistence.store, thread_id).get(1)
        assert record is not None
        record["messages"][0]["data"]["content"] = "rewritten after the fact"
        persistence.store.put(thread_archive(thread_id), version_key(1), dict(record))
    broken = run_ctxgraph(python, env, "threads", "verify", thread_id)
    assert broken.returncode == 1
    assert f"thread {thread_id}: BROKEN at version 1:" in broken.stdout
