"""``ctxgraph demo``: four turns with skills, a restart, a recall, a new thread, what persisted."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path
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
    "/trip-budget What is 180 * 7?",
    "Use the packing-list skill for my trip.",
)
SECOND_PROCESS_TURNS = ("What did I say before?",)
NEW_THREAD_TURNS = ("What do you remember about me?",)
SMALL_TRIGGER = "6"
SMALL_KEEP = "2"
"""Compaction settings of the second process, so the demo shows one compaction."""
SKILLS_VARIABLE = "CTXGRAPH_SKILLS_DIRS"


def example_skills_dir() -> Path | None:
    """The repository's ``examples/skills`` folder, or None (e.g. when installed as a wheel).

    The repository's root is the parent of the ``ctxgraph`` package folder.
    """
    spec = importlib.util.find_spec("ctxgraph")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).resolve().parent.parent / "examples" / "skills"
    return folder if folder.is_dir() else None


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
    skills_dir = example_skills_dir()
    # Set either way, so a skill folder configured in the caller's environment stays out.
    skills = {SKILLS_VARIABLE: str(skills_dir) if skills_dir is not None else ""}
    # Holding the database open here keeps the embedded server up between the two children.
    with open_persistence() as persistence:
        out.write(f"ctxgraph demo: thread {thread}, scripted model, database ready\n")
        if skills_dir is not None:
            out.write(f"skills: the examples in {skills_dir} ({SKILLS_VARIABLE})\n\n")
        else:
            out.write("skills: none (no examples/skills folder next to the package)\n\n")
        turns = plural(len(FIRST_PROCESS_TURNS), "turn")
        out.write(f"== process 1: {turns} in a new Python process\n")
        if _run_in_child(user, thread, FIRST_PROCESS_TURNS, out, **skills) != 0:
            return 1
        out.write(
            "\n== process 1 exited; process 2 starts from the database alone, with a small "
            f"compaction trigger ({SMALL_TRIGGER} messages, keep {SMALL_KEEP})\n"
        )
        small = {"CTXGRAPH_TRIGGER_MESSAGES": SMALL_TRIGGER, "CTXGRAPH_KEEP_MESSAGES": SMALL_KEEP}
        if _run_in_child(user, thread, SECOND_PROCESS_TURNS, out, **small, **skills) != 0:
            return 1
        out.write("\n== process 3: a new thread for the same user; long-term memory comes back\n")
        if _run_in_child(user, f"{thread}-later", NEW_THREAD_TURNS, out, **skills) != 0:
            return 1
        out.write(
            "\n== persisted state of the first thread (archive, then window; one line per "
            f"message here, `ctxgraph threads show {thread}` prints them in full)\n"
        )
        show_thread(persistence, thread, out, with_summary=True, clip=LINE_CHARS)
        out.write(f"(`ctxgraph threads show {thread} --summary` prints this summary and ledger)\n")
        out.write("\n== integrity\n")
        verify_thread_command(persistence, thread, out)
        variables = f"CTXGRAPH_MODEL={SCRIPTED_MODEL_NAME}"
        if skills_dir is not None:
            variables += f" {SKILLS_VARIABLE}={shlex.quote(str(skills_dir))}"
        out.write(
            f"\nResume it yourself: {variables} ctxgraph chat --user {user} --thread {thread}\n"
        )
    return 0
