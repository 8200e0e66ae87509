"""``ctxgraph demo``: two turns, a process restart, a third turn, then what was persisted."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import TextIO

from graph.cli.threads import show_thread
from state.models import SCRIPTED_MODEL_NAME
from store.persistence import open_persistence

FIRST_PROCESS_TURNS = ("I am planning a trip to Kyoto in April.", "What is 17 * 23?")
SECOND_PROCESS_TURNS = ("What did I say before?",)


def _run_in_child(user: str, thread_id: str, turns: tuple[str, ...], out: TextIO) -> int:
    """Run turns in a fresh Python process, so only the database carries state across."""
    env = {**os.environ, "CTXGRAPH_MODEL": SCRIPTED_MODEL_NAME}
    command = [sys.executable, "-m", "graph.cli", "run", "--user", user, "--thread", thread_id]
    completed = subprocess.run(
        [*command, *turns], env=env, capture_output=True, text=True, check=False
    )
    out.write(completed.stdout)
    if completed.returncode != 0:
        out.write(completed.stderr)
    return completed.returncode


def run_demo(out: TextIO, *, user: str = "demo-user", thread_id: str | None = None) -> int:
    """Run the offline demo on the configured database (embedded Postgres by default)."""
    thread = thread_id or f"demo-{uuid.uuid4().hex[:8]}"
    # Holding the database open here keeps the embedded server up between the two children.
    with open_persistence() as persistence:
        out.write(f"ctxgraph demo: thread {thread}, scripted model, database ready\n\n")
        out.write(f"== process 1: {len(FIRST_PROCESS_TURNS)} turns in a new Python process\n")
        if _run_in_child(user, thread, FIRST_PROCESS_TURNS, out) != 0:
            return 1
        out.write("\n== process 1 exited; process 2 starts from the database alone\n")
        if _run_in_child(user, thread, SECOND_PROCESS_TURNS, out) != 0:
            return 1
        out.write("\n== persisted state of the thread\n")
        show_thread(persistence, thread, out)
        out.write(
            "\nResume it yourself: "
            f"CTXGRAPH_MODEL={SCRIPTED_MODEL_NAME} ctxgraph chat --user {user} --thread {thread}\n"
        )
    return 0
