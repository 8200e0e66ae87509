"""Starts several child processes at once and collects what each printed and returned."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from tests.support.cli import REPO_ROOT

USER_LINE = re.compile(r"^\[\d+\] user: (.*)$", re.MULTILINE)
"""A user message in ``ctxgraph threads show``: ``[n] user: text``."""

ANSWER_LINE = re.compile(r"^\[\d+\] assistant: (.*)$", re.MULTILINE)
"""A final answer in ``ctxgraph threads show``."""


@dataclass(frozen=True)
class Finished:
    """One child process after it exited."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def race(
    commands: Sequence[Sequence[str]],
    envs: Sequence[dict[str, str]],
    *,
    stdin: Sequence[str | None] | None = None,
    timeout: float = 180,
) -> list[Finished]:
    """Start every command before waiting for any, then wait for all of them."""
    inputs = list(stdin) if stdin is not None else [None] * len(commands)
    children = [
        subprocess.Popen(
            list(command),
            env=env,
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE if text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command, env, text in zip(commands, envs, inputs, strict=True)
    ]
    finished: list[Finished] = []
    try:
        for child, command, text in zip(children, commands, inputs, strict=True):
            out, err = child.communicate(text, timeout=timeout)
            finished.append(Finished(tuple(command), child.returncode, out, err))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return finished


def ctxgraph_command(python: str, *args: str) -> list[str]:
    """The command line of ``ctxgraph ARGS`` run with ``python``."""
    return [python, "-m", "ctxgraph.graph.cli", *args]
