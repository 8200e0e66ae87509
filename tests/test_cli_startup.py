"""The command line starts without the model client, the search libraries or numpy."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from tests.support.cli import run_ctxgraph, run_python

HEAVY = ("langchain_openai", "jieba", "numpy")
"""Modules only a model call or a memory search needs."""

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
