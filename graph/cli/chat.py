"""``ctxgraph chat`` and ``ctxgraph run``: talk to a persistent thread from the terminal."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from contextlib import ExitStack
from typing import TextIO

from langchain_core.runnables import RunnableConfig

from ctxgraph.graph.builder import Graph
from ctxgraph.graph.cli.render import LINE_CHARS, plural, transcript_lines
from ctxgraph.graph.cli.turns import stream_turn
from ctxgraph.graph.environment import EnvironmentConfig
from ctxgraph.state.context import Context
from ctxgraph.store.persistence.connection import open_persistence
from ctxgraph.store.persistence.thread_lock import DEFAULT_WAIT, thread_lock

EXIT_COMMANDS = {"/exit", "/quit"}
RESUME_TAIL = 6


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def run_turns(
    texts: Iterable[str],
    *,
    context: Context,
    thread_id: str,
    out: TextIO,
    interactive: bool,
    wait: float = DEFAULT_WAIT,
) -> int:
    """Run each text as one turn on ``thread_id``; in interactive mode, read turns from stdin.

    Only one run writes to a thread at a time (see ``thread_lock``): ``run`` holds the
    thread for all its turns, so they stay together and a busy thread leaves nothing
    written; ``chat`` holds it for each turn, so two chats on one thread take turns.
    Either raises ``ThreadBusyError`` when another run keeps the thread past ``wait``.
    """
    configured = EnvironmentConfig.read(os.environ)
    with open_persistence() as persistence:
        graph = configured.build(checkpointer=persistence.checkpointer, store=persistence.store)
        config = _config(thread_id)
        with ExitStack() as whole_run:
            if not interactive:
                whole_run.enter_context(thread_lock(persistence, thread_id, wait=wait))
            # In chat this read is not under the lock: it reads the latest checkpoint in
            # one statement, only to show it, and each turn then starts from whatever
            # checkpoint is latest once it holds the lock.
            _show_resume(graph, config, thread_id, out, interactive=interactive)
            for text in texts:
                if text.strip() in EXIT_COMMANDS:
                    break
                if not text.strip():
                    continue
                if not interactive:
                    out.write(f"you: {text}\n")
                    stream_turn(graph, text, config=config, context=context, out=out)
                    continue
                with thread_lock(persistence, thread_id, wait=wait):
                    stream_turn(graph, text, config=config, context=context, out=out)
    return 0


def _show_resume(
    graph: Graph, config: RunnableConfig, thread_id: str, out: TextIO, *, interactive: bool
) -> None:
    """Say whether the thread is new, or show the last messages of the resumed thread."""
    existing = graph.get_state(config).values.get("messages", [])
    if existing:
        start = max(0, len(existing) - RESUME_TAIL)
        shown = len(existing) - start
        last = "Last message" if shown == 1 else f"Last {shown} messages"
        out.write(f"Resuming thread {thread_id} ({plural(len(existing), 'message')}). {last}:\n")
        tail = transcript_lines(existing[start:], start=start + 1, clip=LINE_CHARS)
        out.write("\n".join(tail) + "\n")
    elif interactive:
        out.write(f"New thread {thread_id}.\n")
    if interactive:
        out.write("Type a message; /exit or end of input quits.\n")


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
