"""Runs the ``ctxgraph`` command line in a child process, as a user would."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def run_ctxgraph(
    python: str, env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ctxgraph.graph.cli ARGS`` from the repository root and capture its output."""
    return run_module(python, env, "ctxgraph.graph.cli", *args, stdin=stdin)


def run_module(
    python: str, env: dict[str, str], module: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m MODULE ARGS`` from the repository root and capture its output."""
    return run_python(python, env, "-m", module, *args, stdin=stdin)


def run_python(
    python: str, env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` from the repository root and capture its output."""
    return subprocess.run(
        [python, *args],
        env=env,
        cwd=REPO_ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def start_python(python: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """Start ``python ARGS`` from the repository root, its standard streams all pipes."""
    return subprocess.Popen(
        [python, *args],
        env=env,
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
