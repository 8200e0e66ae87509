"""``ctxgraph chat`` and ``ctxgraph run``: talk to a persistent thread from the terminal."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import TextIO

from langchain_core.runnables import RunnableConfig

from ctxgraph.graph.cli.render import LINE_CHARS, plural, transcript_lines
from ctxgraph.graph.cli.turns import stream_turn
from ctxgraph.graph.environment import EnvironmentConfig
from ctxgraph.state.context import Context
from ctxgraph.store.persistence.connection import open_persistence

EXIT_COMMANDS = {"/exit", "/quit"}
RESUME_TAIL = 6


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def run_turns(
    texts: Iterable[str], *, context: Context, thread_id: str, out: TextIO, interactive: bool
) -> int:
    """Run each text as one turn on ``thread_id``; in interactive mode, read turns from stdin."""
    configured = EnvironmentConfig.read(os.environ)
    with open_persistence() as persistence:
        graph = configured.build(checkpointer=persistence.checkpointer, store=persistence.store)
        config = _config(thread_id)
        existing = graph.get_state(config).values.get("messages", [])
        if existing:
            start = max(0, len(existing) - RESUME_TAIL)
            shown = len(existing) - start
            last = "Last message" if shown == 1 else f"Last {shown} messages"
            out.write(
                f"Resuming thread {thread_id} ({plural(len(existing), 'message')}). {last}:\n"
            )
            tail = transcript_lines(existing[start:], start=start + 1, clip=LINE_CHARS)
            out.write("\n".join(tail) + "\n")
        elif interactive:
            out.write(f"New thread {thread_id}.\n")
        if interactive:
            out.write("Type a message; /exit or end of input quits.\n")
        for text in texts:
            if text.strip() in EXIT_COMMANDS:
                break
            if not text.strip():
                continue
            if not interactive:
                out.write(f"you: {text}\n")
            stream_turn(graph, text, config=config, context=context, out=out)
    return 0


def prompt_lines(prompt: str, out: TextIO) -> Iterable[str]:
    """Read lines from the terminal until end of input."""
    while True:
        out.write(prompt)
        out.flush()
        try:
            line = input()
        except EOFError:
            out.write("\n")
            return
        if not sys.stdin.isatty():
            out.write(line + "\n")  # piped input is not echoed by a terminal
        yield line
