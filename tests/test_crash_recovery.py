"""A crash at any durable write of a compacting turn leaves every message shown exactly once."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import run_ctxgraph, run_module
from tests.support.crash_child import (
    AFTER_TURN,
    CONTEXT,
    CRASH_STATUS,
    CRASH_TURN,
    SETTINGS,
    SETUP_TURNS,
)

LEFTOVER = re.compile(r"also found v2 above the committed mark \(v1\): it is a prepared leftover")


def counts(shown: str, texts: list[str]) -> list[int]:
    """How often each user text appears in a ``threads show`` transcript."""
    return [shown.count(f"] user: {text}\n") for text in texts]


def assert_each_once(found: dict[str, Any], thread: str) -> None:
    """Setup turns once each, the crashed turn at most once, verify intact, both times."""
    before, after = found["before"], found["after"]
    assert counts(before["show"], SETUP_TURNS) == [1] * len(SETUP_TURNS), (thread, before)
    assert counts(before["show"], [CRASH_TURN])[0] in (0, 1), (thread, before)
    assert before["status"] == 0, (thread, before["verify"])
    assert counts(after["show"], SETUP_TURNS) == [1] * len(SETUP_TURNS), (thread, after)
    # The crashed turn's message is there after the next turn exactly as often as before.
    assert counts(after["show"], [CRASH_TURN]) == counts(before["show"], [CRASH_TURN])
    assert counts(after["show"], [AFTER_TURN]) == [1], (thread, after)
    assert after["status"] == 0, (thread, after["verify"])
    assert "prepared leftover" not in after["verify"], (thread, after["verify"])
    assert re.search(r"intact \(2 compaction versions verified", after["verify"]), thread


def test_a_crash_before_any_write_of_a_compacting_turn_loses_and_duplicates_nothing(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, database_uri: str
) -> None:
    prefix = f"crash-{uuid.uuid4().hex[:10]}"
    crashed = run_module(python, subprocess_env, "tests.support.crash_child", database_uri, prefix)
    assert crashed.returncode == 0, crashed.stderr
    report = json.loads(crashed.stdout)
    writes: list[str] = report["counted"]["writes"]
    # The counted turn compacted a second time: version 1 was committed by the setup turns.
    assert report["counted"]["versions"] == [1, 2]
    archive_write = writes.index(f"store threads/{prefix}-0/archive") + 1
    compact_writes = next(n for n, w in enumerate(writes, 1) if "compaction" in w)
    assert archive_write < compact_writes
    assert sum(w.startswith("checkpoint put") for w in writes) >= 4
    # Every child died just before its write, never after finishing.
    expected = {str(n): CRASH_STATUS for n in range(1, len(writes) + 1)}
    assert report["statuses"] == {**expected, "leftover": CRASH_STATUS}

    others = [f"{prefix}-{n}" for n in range(len(writes) + 1)]
    checked = run_module(python, subprocess_env, "tests.support.crash_check", database_uri, *others)
    assert checked.returncode == 0, checked.stderr
    found = json.loads(checked.stdout)
    for thread in others:
        assert_each_once(found[thread], thread)

    # Right after the archive write, before the compact node's own writes: the archive
    # holds a prepared version 2 above the committed mark. The command line shows and
    # verifies that thread as it is, then runs the next turn, then again.
    leftover = f"{prefix}-leftover"

    env = {
        **subprocess_env,
        "CTXGRAPH_TRIGGER_MESSAGES": str(SETTINGS.trigger_messages),
        "CTXGRAPH_KEEP_MESSAGES": str(SETTINGS.keep_messages),
    }
    cli: dict[str, Any] = {}
    for moment in ("before", "after"):
        shown = run_ctxgraph(python, env, "threads", "show", leftover)
        verified = run_ctxgraph(python, env, "threads", "verify", leftover)
        assert shown.returncode == 0, shown.stderr
        cli[moment] = {
            "show": shown.stdout,
            "verify": verified.stdout,
            "status": verified.returncode,
        }
        if moment == "before":
            assert LEFTOVER.search(verified.stdout), verified.stdout
            assert "1 compaction version verified" in verified.stdout
            ran = run_ctxgraph(
                python, env, "run", "--user", CONTEXT.user_id, "--thread", leftover, AFTER_TURN
            )
            assert ran.returncode == 0, ran.stderr
    assert_each_once(cli, leftover)
