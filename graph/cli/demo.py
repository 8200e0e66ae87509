"""``ctxgraph demo``: three turns, a restart, a fourth turn, a new thread, then what persisted."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import TextIO

from ctxgraph.graph.cli.render import LINE_CHARS, plural
from ctxgraph.graph.cli.threads import show_thread, verify_thread_command
from ctxgraph.state.models import SCRIPTED_MODEL_NAME
from ctxgraph.store.persistence.connection import open_persistence

FIRST_PROCESS_TURNS = (
    "I am planning a trip to Kyoto in April. I land at Kansai airport on April 3 and leave on "
    "April 10. I want to see the cherry blossoms along the Philosopher's Path, visit "
    "Fushimi Inari early in the morning before the crowds and spend one day in Nara. "
    "Keep the hotel under 180 euros a night. I do not eat meat, so please keep that in "
    "mind for any restaurant ideas. Never book anything that cannot be cancelled. "
    "I prefer quiet hotels near a train station.",
    "What is 17 * 23?",
    "What is 180 * 7?",
)
SECOND_PROCESS_TURNS = ("What did I say before?",)
NEW_THREAD_TURNS = ("What do you remember about me?",)
SMALL_TRIGGER = "6"
SMALL_KEEP = "2"
"""Compaction settings of the second process, so the demo shows one compaction."""


def _run_in_child(
    user: str, thread_id: str, turns: tuple[str, ...], out: TextIO, **settings: str
) -> int:
    """Run turns in a fresh Python process, so only the database carries state across."""
    env = {**os.environ, "CTXGRAPH_MODEL": SCRIPTED_MODEL_NAME, **settings}
    command = [
        sys.executable,
        "-m",
        "ctxgraph.graph.cli",
        "run",
        "--user",
        user,
        "--thread",
        thread_id,
    ]
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
        turns = plural(len(FIRST_PROCESS_TURNS), "turn")
        out.write(f"== process 1: {turns} in a new Python process\n")
        if _run_in_child(user, thread, FIRST_PROCESS_TURNS, out) != 0:
            return 1
        out.write(
            "\n== process 1 exited; process 2 starts from the database alone, with a small "
            f"compaction trigger ({SMALL_TRIGGER} messages, keep {SMALL_KEEP})\n"
        )
        small = {"CTXGRAPH_TRIGGER_MESSAGES": SMALL_TRIGGER, "CTXGRAPH_KEEP_MESSAGES": SMALL_KEEP}
        if _run_in_child(user, thread, SECOND_PROCESS_TURNS, out, **small) != 0:
            return 1
        out.write("\n== process 3: a new thread for the same user; long-term memory comes back\n")
        if _run_in_child(user, f"{thread}-later", NEW_THREAD_TURNS, out) != 0:
            return 1
        out.write(
            "\n== persisted state of the first thread (archive, then window; one line per "
            f"message here, `ctxgraph threads show {thread}` prints them in full)\n"
        )
        show_thread(persistence, thread, out, with_summary=True, clip=LINE_CHARS)
        out.write(f"(`ctxgraph threads show {thread} --summary` prints this summary and ledger)\n")
        out.write("\n== integrity\n")
        verify_thread_command(persistence, thread, out)
        out.write(
            "\nResume it yourself: "
            f"CTXGRAPH_MODEL={SCRIPTED_MODEL_NAME} ctxgraph chat --user {user} --thread {thread}\n"
        )
    return 0
