"""The command line starts without the model client, the search libraries or numpy."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_ctxgraph, run_python

HEAVY = ("langchain_openai", "jieba", "numpy")
"""Modules only a model call or a memory search needs."""

GRAPH_STACK = (
    "openai",
    "langsmith",
    "langgraph.graph",
    "langgraph.pregel",
    "langgraph.prebuilt",
    "langchain_core.tools",
    "langchain_core.tracers",
    "langchain_core.language_models.base",
    "ctxgraph.graph.builder",
    "ctxgraph.graph.environment",
    "ctxgraph.nodes.memory.worker",
    "ctxgraph.state.graph_state",
)
"""Modules only building or running the graph needs: the read-only commands load none.

Measured with ``python -X importtime -m ctxgraph.graph.cli threads show T``: before these
commands imported only what they need, the graph stack (LangGraph's graph and Pregel
loop, LangChain's tools and tracers with LangSmith) was most of their 1.3-1.6 s of imports.
"""

DATABASE_FREE = ("psycopg", "langgraph", "langchain_core", "pydantic", "tiktoken")
"""What ``skills list`` and ``skills show`` (folders only) do not load either."""

SKILL = """---
name: greet
description: Greets the user by name.
allowed-tools: calculator read_history
---

Say hello.
"""

CHILD = textwrap.dedent(
    """
    import json
    import sys

    from ctxgraph.graph.cli.main import main

    try:
        code = main(sys.argv[1:])
    except SystemExit as stop:
        code = stop.code
    print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
    """
)
"""Runs the CLI entry point with the given arguments, then reports every loaded module."""


def run_entry(python: str, env: dict[str, str], *args: str) -> tuple[str, dict[str, Any]]:
    """Call ``main(args)`` in a fresh interpreter; its stdout and its final report."""
    child = run_python(python, env, "-c", CHILD, *args)
    assert child.returncode == 0, child.stderr
    report: dict[str, Any] = json.loads(child.stderr.strip().splitlines()[-1])
    return child.stdout, report


def heavy_modules(modules: list[str]) -> list[str]:
    return [name for name in modules if name.split(".")[0] in HEAVY]


def loaded(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    """The modules that are one of ``prefixes`` or inside one of them."""
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_help_loads_no_heavy_module(python: str, subprocess_env: dict[str, str]) -> None:
    out, report = run_entry(python, subprocess_env, "--help")
    assert report["code"] == 0
    assert "usage: ctxgraph" in out and "threads" in out
    assert heavy_modules(report["modules"]) == []
    assert "ctxgraph.graph.cli.threads" not in report["modules"]


def test_subcommand_help_loads_no_heavy_module(python: str, subprocess_env: dict[str, str]) -> None:
    out, report = run_entry(python, subprocess_env, "threads", "show", "--help")
    assert report["code"] == 0
    assert "--summary" in out and "ledger" in out
    assert heavy_modules(report["modules"]) == []


def test_threads_show_loads_no_heavy_module(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    turn = ("run", "--user", "u-startup", "--thread", thread_id, "What is 6 * 7?")
    created = run_ctxgraph(python, subprocess_env, *turn)
    assert created.returncode == 0, created.stderr
    assert "assistant: The calculator says 42." in created.stdout

    out, report = run_entry(python, subprocess_env, "threads", "show", thread_id, "--summary")
    assert report["code"] == 0
    assert out.startswith(f"thread {thread_id}: 4 messages\n"), out
    assert "[4] assistant: The calculator says 42." in out
    assert "no summary yet" in out
    assert heavy_modules(report["modules"]) == []


def test_unknown_thread_error_loads_no_heavy_module(
    python: str, subprocess_env: dict[str, str]
) -> None:
    # The one-line error path imports the error classes, but still not the heavy modules.
    child = run_python(
        python, subprocess_env, "-c", CHILD, "threads", "show", "no-such-thread-startup"
    )
    lines = child.stderr.strip().splitlines()
    missing = "no thread 'no-such-thread-startup' has been saved in this database"
    assert lines[0] == f"ctxgraph: {missing}"
    report = json.loads(lines[-1])
    assert report["code"] == 2
    assert heavy_modules(report["modules"]) == []


def test_scripted_model_from_env_stays_in_the_state_layer(
    python: str, subprocess_env: dict[str, str]
) -> None:
    script = textwrap.dedent(
        """
        import json
        import sys

        from ctxgraph.state.models import Models

        models = Models.from_env({"CTXGRAPH_MODEL": "scripted"})
        roles = [type(m).__name__ for m in (models.main, models.summary_model, models.memory_model)]
        loaded = sorted(m for m in sys.modules if m.startswith("ctxgraph."))
        print(json.dumps({"roles": roles, "loaded": loaded}))
        """
    )
    child = run_python(python, subprocess_env, "-c", script)
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout)
    assert report["roles"] == ["ScriptedChatModel"] * 3
    assert report["loaded"], "nothing of ctxgraph was loaded"
    assert [m for m in report["loaded"] if not m.startswith("ctxgraph.state")] == []


@pytest.fixture
def one_turn_thread(python: str, subprocess_env: dict[str, str], thread_id: str) -> str:
    """A thread with one turn (a calculator call), and its user's memory, saved."""
    turn = ("run", "--user", "u-startup", "--thread", thread_id, "What is 6 * 7?")
    created = run_ctxgraph(python, subprocess_env, *turn)
    assert created.returncode == 0, created.stderr
    return thread_id


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("threads", "show", "{thread}", "--summary"), "[4] assistant: The calculator says 42."),
        (("threads", "verify", "{thread}"), "intact"),
        (("memory", "list", "--user", "u-startup"), "user u-startup"),
        (("memory", "search", "--user", "u-startup", "calculator"), "u-startup"),
        (("memory", "export", "--user", "u-startup"), "{"),
    ],
    ids=["threads-show", "threads-verify", "memory-list", "memory-search", "memory-export"],
)
def test_read_only_commands_load_neither_the_graph_nor_the_model_clients(
    python: str,
    subprocess_env: dict[str, str],
    one_turn_thread: str,
    argv: tuple[str, ...],
    expected: str,
) -> None:
    args = [arg.format(thread=one_turn_thread) for arg in argv]
    out, report = run_entry(python, subprocess_env, *args)
    assert report["code"] == 0
    assert expected in out
    assert heavy_modules(report["modules"]) == []
    assert loaded(report["modules"], GRAPH_STACK) == []


@pytest.mark.parametrize("command", ["list", "show"])
def test_skills_commands_load_no_database_or_langchain_module(
    python: str, subprocess_env: dict[str, str], tmp_path: Path, command: str
) -> None:
    (tmp_path / "greet").mkdir()
    (tmp_path / "greet" / "SKILL.md").write_text(SKILL, encoding="utf-8")
    args = ["skills", command, *(["greet"] if command == "show" else []), "--dir", str(tmp_path)]
    out, report = run_entry(python, subprocess_env, *args)
    assert report["code"] == 0, out
    assert "greet" in out
    if command == "list":
        assert "1 skill; problems: none" in out  # the calculator and read_history are known
    assert loaded(report["modules"], HEAVY + GRAPH_STACK + DATABASE_FREE) == []


def test_skills_list_names_an_unknown_tool_and_the_model_note(
    python: str, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    # Without a model the graph's tools are the built-in ones; the note, which needs the
    # model configuration, is read only because a tool is unknown.
    (tmp_path / "greet").mkdir()
    (tmp_path / "greet" / "SKILL.md").write_text(SKILL, encoding="utf-8")
    env = {k: v for k, v in subprocess_env.items() if k != "CTXGRAPH_MODEL"}
    child = run_python(python, env, "-c", CHILD, "skills", "list", "--dir", str(tmp_path))
    report = json.loads(child.stderr.strip().splitlines()[-1])
    assert report["code"] == 1
    assert "1 skill; problems (1):\n" in child.stdout
    assert "allowed-tools: unknown tool 'calculator' (the graph's tools are: grep_artifact, " in (
        child.stdout
    )
    assert child.stdout.endswith(
        "note: the model is not configured, so allowed-tools were checked against the "
        "built-in tools only (CTXGRAPH_MODEL=scripted adds the demo's calculator)\n"
    )
    assert loaded(report["modules"], ("psycopg", "langgraph.graph", "ctxgraph.graph.builder")) == []


def test_an_unknown_skill_error_loads_no_database_module(
    python: str, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    name = f"nope-{uuid.uuid4().hex[:6]}"
    child = run_python(
        python, subprocess_env, "-c", CHILD, "skills", "show", name, "--dir", str(tmp_path)
    )
    lines = child.stderr.strip().splitlines()
    assert lines[0].startswith(f"ctxgraph: no skill '{name}' in ")
    report = json.loads(lines[-1])
    assert report["code"] == 2
    assert loaded(report["modules"], HEAVY + GRAPH_STACK + DATABASE_FREE) == []
