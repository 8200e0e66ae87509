"""``chat`` and ``run`` print each message a turn adds once: what ``threads show`` stores.

In background compaction mode the compaction node writes the whole kept window again; its
messages were printed when they were added, and are not printed again. A reply the graph
writes itself (the one to an unknown ``/skill``) does not stream, and is printed whole.
Routine compaction notices reach stderr only with ``--verbose``, as ``note:`` lines.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctxgraph.graph.cli.main import build_parser
from tests.support.cli import run_ctxgraph

SKILL = """---
name: greet
description: Greets the user by name.
---

Say hello.
"""

TURNS = [
    *(f"What is {n} * 7?" for n in range(1, 5)),
    "/gret hello",
    *(f"What is {n} * 7?" for n in range(5, 9)),
]
"""Calculator turns (a tool call and result each) around an unknown ``/skill``."""

UNKNOWN_SKILL_REPLY = "assistant: There is no skill called /gret. Did you mean /greet?"

NUMBERED = re.compile(r"^\[\d+\] (?P<role>user|assistant|tool)(?P<rest>.*)$")


@pytest.fixture
def background_env(subprocess_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """Background compaction with triggers a few turns reach, and one skill folder."""
    (tmp_path / "skills" / "greet").mkdir(parents=True)
    (tmp_path / "skills" / "greet" / "SKILL.md").write_text(SKILL, encoding="utf-8")
    return {
        **subprocess_env,
        "CTXGRAPH_COMPACTION_MODE": "background",
        "CTXGRAPH_TRIGGER_MESSAGES": "8",
        "CTXGRAPH_KEEP_MESSAGES": "2",
        "CTXGRAPH_MEMORY_EXTRACTION": "off",
        "CTXGRAPH_SKILLS_DIRS": str(tmp_path / "skills"),
    }


def stored_lines(python: str, env: dict[str, str], thread_id: str) -> list[str]:
    """The thread as ``threads show`` prints it (archive, then window), as a turn prints it.

    ``[n] user: X`` is printed ``you: X``, ``[n] assistant: X`` as ``assistant: X``, a tool
    result ``[n] tool ...`` as ``  ← ...``; tool calls are the same line; the header of
    an assistant message with tool calls only, and the compaction markers, are not printed.
    """
    shown = run_ctxgraph(python, env, "threads", "show", thread_id)
    assert shown.returncode == 0, shown.stderr
    assert "──── compaction v" in shown.stdout, "no compaction ran: the test proves nothing"
    lines: list[str] = []
    for line in shown.stdout.splitlines()[1:]:
        numbered = NUMBERED.match(line)
        if numbered is None:
            if line.startswith("  → "):
                lines.append(line)
            continue
        role, rest = numbered.group("role"), numbered.group("rest")
        if role == "user":
            lines.append("you" + rest)
        elif role == "assistant" and rest != " (tool calls)":
            lines.append("assistant" + rest)
        elif role == "tool":
            lines.append("  ←" + rest)
    return lines


def routine_notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "compaction" in line]


def test_run_prints_each_added_message_once_as_stored(
    python: str, background_env: dict[str, str], thread_id: str
) -> None:
    args = ("run", "--user", "u-display", "--thread", thread_id, *TURNS)
    result = run_ctxgraph(python, background_env, *args)
    assert result.returncode == 0, result.stderr

    printed = result.stdout.splitlines()
    assert printed == stored_lines(python, background_env, thread_id)
    assert printed.count(UNKNOWN_SKILL_REPLY) == 1
    calls = [line for line in printed if line.startswith("  → ")]
    assert len(calls) == len(set(calls)) == len(TURNS) - 1
    assert routine_notices(result.stderr) == [], result.stderr


def test_chat_prints_each_added_message_once_as_stored(
    python: str, background_env: dict[str, str], thread_id: str
) -> None:
    args = ("chat", "--user", "u-display", "--thread", thread_id)
    chat = run_ctxgraph(python, background_env, *args, stdin="\n".join(TURNS) + "\n")
    assert chat.returncode == 0, chat.stderr

    lines = chat.stdout.splitlines()
    assert lines[:2] == [f"New thread {thread_id}.", "Type a message; /exit or end of input quits."]
    assert lines[-1] == "you: "  # the prompt that met the end of input
    assert lines[2:-1] == stored_lines(python, background_env, thread_id)
    assert lines.count(UNKNOWN_SKILL_REPLY) == 1
    assert routine_notices(chat.stderr) == [], chat.stderr


def test_verbose_shows_the_routine_notices_as_notes(
    python: str, background_env: dict[str, str], thread_id: str
) -> None:
    turns = [f"What is {n} * 7?" for n in range(1, 7)]
    args = ("run", "--verbose", "--user", "u-display", "--thread", thread_id, *turns)
    result = run_ctxgraph(python, background_env, *args)
    assert result.returncode == 0, result.stderr

    notices = routine_notices(result.stderr)
    assert notices, result.stderr
    assert all(line.startswith("note: ") for line in notices), notices
    assert any(line.startswith("note: compaction.started thread=") for line in notices)
    assert not [line for line in result.stderr.splitlines() if line.startswith("ctxgraph: ")]
    assert result.stdout.splitlines() == stored_lines(python, background_env, thread_id)


@pytest.mark.parametrize(
    ("argv", "verbose"),
    [
        (["run", "--user", "u", "--thread", "t", "x"], False),
        (["--verbose", "run", "--user", "u", "--thread", "t", "x"], True),
        (["run", "--verbose", "--user", "u", "--thread", "t", "x"], True),
        (["chat", "--verbose", "--user", "u", "--thread", "t"], True),
        (["threads", "show", "t"], False),
    ],
)
def test_verbose_goes_before_or_after_the_subcommand(argv: list[str], verbose: bool) -> None:
    assert build_parser().parse_args(argv).verbose is verbose
