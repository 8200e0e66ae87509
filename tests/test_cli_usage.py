"""``ctxgraph threads show T --usage`` on threads checkpointed in Postgres by another process."""

from __future__ import annotations

import io
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from ctxgraph.graph.cli.threads import load_thread, show_thread
from ctxgraph.graph.cli.usage_table import NO_USAGE, usage_lines
from ctxgraph.store.persistence.archive import record_messages
from ctxgraph.store.persistence.connection import Persistence, open_persistence
from tests.support.cli import run_ctxgraph

TURNS = [f"Note {n}: order A-{1000 + n} ships on 2026-09-{n + 10:02d}." for n in range(14)]
HEADINGS = ["role", "calls", "input", "tokens", "output", "tokens", "cached", "tokens", "counted"]


def table(out: str) -> dict[str, list[int]]:
    """The usage table printed at the end of ``out``: role -> its five counts."""
    lines = out[out.index("\nmodel usage:\n") + 1 :].splitlines()
    assert lines[0] == "model usage:"
    assert lines[1].split()[: len(HEADINGS)] == HEADINGS
    rows: dict[str, list[int]] = {}
    for line in lines[2:]:
        role, *counts = line.split()
        rows[role] = [int(count) for count in counts]
    return rows


def test_usage_of_a_compacted_thread_is_read_back_in_a_new_process(
    python: str, subprocess_env: dict[str, str], thread_id: str, database_uri: str
) -> None:
    env = {**subprocess_env, "CTXGRAPH_TRIGGER_MESSAGES": "10", "CTXGRAPH_KEEP_MESSAGES": "4"}
    ran = run_ctxgraph(python, env, "run", "--user", "u1", "--thread", thread_id, *TURNS)
    assert ran.returncode == 0, ran.stderr
    shown = run_ctxgraph(python, env, "threads", "show", thread_id, "--usage")
    assert shown.returncode == 0, shown.stderr
    rows = table(shown.stdout)
    with open_persistence(database_uri) as persistence:
        thread = load_thread(persistence, thread_id)
    everything = [m for r in thread.archive for m in record_messages(r)] + thread.window
    answers = sum(1 for m in everything if isinstance(m, AIMessage))
    # The scripted models report no usage: every call is counted locally.
    saved = thread.usage
    assert rows["main"][0] == answers == saved["main"]["calls"]
    assert len(thread.archive) >= 2 and rows["summary"][0] >= len(thread.archive)
    for role, counts in rows.items():
        if role == "total":
            continue
        usage = saved[role]
        fields = ("calls", "input_tokens", "output_tokens", "cached_tokens", "local_calls")
        assert counts == [usage[name] for name in fields]  # type: ignore[literal-required]
        assert counts[4] == counts[0] and counts[1] > 0 and counts[3] == 0
    assert list(rows)[:2] == ["main", "summary"] and list(rows)[-1] == "total"
    summed = [sum(rows[r][i] for r in rows if r != "total") for i in range(5)]
    assert rows["total"] == summed
    plain = run_ctxgraph(python, env, "threads", "show", thread_id)
    assert shown.stdout == plain.stdout + "\n" + "\n".join(usage_lines(saved)) + "\n"


def test_a_thread_without_usage_says_so(persistence: Persistence, thread_id: str) -> None:
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    version = persistence.checkpointer.get_next_version(None, None)
    checkpoint["channel_values"] = {
        "messages": [HumanMessage("hello", id="m1"), AIMessage("hi", id="m2")]
    }
    checkpoint["channel_versions"] = {"messages": version}
    metadata: Any = {"source": "input", "step": -1}
    persistence.checkpointer.put(config, checkpoint, metadata, {"messages": version})
    out = io.StringIO()
    show_thread(persistence, thread_id, out, usage=True)
    assert out.getvalue() == (
        f"thread {thread_id}: 2 messages\n[1] user: hello\n[2] assistant: hi\n\n{NO_USAGE}\n"
    )


def test_the_table_lists_known_roles_first_and_totals_them() -> None:
    usage = {
        "zeta": {"calls": 1, "input_tokens": 5, "output_tokens": 1, "local_calls": 1},
        "subagent": {"calls": 2, "input_tokens": 70, "output_tokens": 9, "cached_tokens": 4},
        "main": {"calls": 3, "input_tokens": 1200, "output_tokens": 30, "cached_tokens": 800},
        "memory": {"calls": 0, "input_tokens": 0, "output_tokens": 0},
    }
    assert usage_lines(usage) == [  # type: ignore[arg-type]
        "model usage:",
        "role      calls  input tokens  output tokens  cached tokens  counted locally",
        "main          3          1200             30            800                0",
        "subagent      2            70              9              4                0",
        "zeta          1             5              1              0                1",
        "total         6          1275             40            804                1",
    ]
    assert usage_lines({}) == [NO_USAGE]
