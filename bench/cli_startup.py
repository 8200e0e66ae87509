"""CLI start-up benchmark: wall time of `ctxgraph --help`, the read-only commands and a `run`.

Every command runs in a fresh process, ``--repeats`` times, interleaved with the baseline
``python -c "import langgraph"`` (starting Python with the dependencies installed); the
report gives each command's median wall time side by side with its ratio to the
baseline's median, then a verdict per target:

- ``ctxgraph --help`` within 1.5x the baseline;
- the read-only commands that open the database (``threads show``, ``threads verify``,
  ``memory list``, ``memory search``, ``memory export``) within 1 s;
- ``skills list`` and ``skills show`` (folders only, no database) within 0.5 s.

The process exits 1 when a target is missed. The commands:

- ``threads show`` and ``threads verify`` read an existing thread (one turn, created
  before timing), ``memory ...`` that thread's user;
- ``skills ...`` read a temporary folder with one skill;
- ``run`` runs one turn on a new thread with the offline scripted model
  (``CTXGRAPH_MODEL=scripted``), memory extraction included.

Postgres is ``DATABASE_URI`` when set. Otherwise the commands use the embedded Postgres,
as the CLI does when ``DATABASE_URI`` is unset, in a temporary ``CTXGRAPH_HOME`` removed
at exit; the benchmark keeps that server up while it runs, so the commands are timed
joining it (a warm server), not starting it. The children write bytecode caches, as an
installed package has them, and one untimed warm-up round of every command fills them
first.

Run ``python -m bench.cli_startup [--repeats 20]``.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

TARGET_RATIO = 1.5
"""``ctxgraph --help`` must take at most this multiple of the baseline's median."""

READ_TARGET_S = 1.0
"""The read-only commands that open the database must answer within this (median)."""

SKILLS_TARGET_S = 0.5
"""``skills list`` and ``skills show`` must answer within this (median)."""

SKILL = "---\nname: greet\ndescription: Greets the user.\nallowed-tools: calculator\n---\n\nHi.\n"
"""The one skill of the folder the ``skills`` commands read."""

DEFAULT_REPEATS = 20
TURN = "What is 6 * 7?"
TIMEOUT_S = 300


@dataclass
class Command:
    """One timed command: a label, its argument list for the n-th run, and its timings."""

    label: str
    argv: Callable[[int], list[str]]
    target: float | None = None
    """The most its median may take, in seconds; None: no absolute target."""
    seconds: list[float] = field(default_factory=list)

    def run(self, number: int, env: dict[str, str]) -> float:
        """Run once and return the wall time; a failing command stops the benchmark."""
        argv = self.argv(number)
        started = time.perf_counter()
        done = subprocess.run(
            argv,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return elapsed

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def ctxgraph_command() -> tuple[list[str], str]:
    """How to start the CLI: the ``ctxgraph`` script of this interpreter, else ``-m``."""
    script = Path(sys.executable).parent / "ctxgraph"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)], f"{script}"
    found = shutil.which("ctxgraph")
    if found:
        return [found], found
    return [sys.executable, "-m", "ctxgraph.graph.cli"], "python -m ctxgraph.graph.cli"


@contextmanager
def database() -> Iterator[tuple[dict[str, str], str]]:
    """Environment entries that point the children at Postgres, and a description.

    ``DATABASE_URI`` when set; else a temporary ``CTXGRAPH_HOME`` whose embedded server
    this process starts and keeps up until it exits.
    """
    configured = os.environ.get("DATABASE_URI", "").strip()
    if configured:
        yield {"DATABASE_URI": configured}, "DATABASE_URI"
        return
    from ctxgraph.store.persistence.embedded import embedded_uri

    root = Path(tempfile.mkdtemp(prefix="ctxgraph-bench-"))
    # Registered before the server starts, so it runs after the server's own stop at exit.
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    home = root / "home"
    embedded_uri(home)
    yield {"CTXGRAPH_HOME": str(home)}, "embedded, temporary CTXGRAPH_HOME"


def child_env(database_env: dict[str, str]) -> dict[str, str]:
    """This environment with the scripted model, bytecode caching on, and the database."""
    drop = ("OPENAI_", "CTXGRAPH_", "DATABASE_URI", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["CTXGRAPH_MODEL"] = "scripted"
    env.update(database_env)
    return env


def commands(cli: list[str], shown_thread: str, run_id: str, skills: str) -> list[Command]:
    """The baseline first, then ``--help``, the read-only commands and ``run``."""
    user = ("--user", "bench-user")

    def fixed(*args: str) -> Callable[[int], list[str]]:
        return lambda _: [*cli, *args]

    return [
        Command(
            'python -c "import langgraph" (baseline)',
            lambda _: [sys.executable, "-c", "import langgraph"],
        ),
        Command("ctxgraph --help", fixed("--help")),
        Command(
            "ctxgraph threads show (one-turn thread)",
            fixed("threads", "show", shown_thread),
            READ_TARGET_S,
        ),
        Command(
            "ctxgraph threads verify (one-turn thread)",
            fixed("threads", "verify", shown_thread),
            READ_TARGET_S,
        ),
        Command("ctxgraph memory list", fixed("memory", "list", *user), READ_TARGET_S),
        Command(
            "ctxgraph memory search", fixed("memory", "search", *user, "calculator"), READ_TARGET_S
        ),
        Command("ctxgraph memory export", fixed("memory", "export", *user), READ_TARGET_S),
        Command(
            "ctxgraph skills list (one skill)",
            fixed("skills", "list", "--dir", skills),
            SKILLS_TARGET_S,
        ),
        Command(
            "ctxgraph skills show (one skill)",
            fixed("skills", "show", "greet", "--dir", skills),
            SKILLS_TARGET_S,
        ),
        Command(
            "ctxgraph run (one turn, scripted model)",
            lambda n: [*cli, "run", *user, "--thread", f"{run_id}-{n}", TURN],
        ),
    ]


def skill_folder() -> str:
    """A temporary folder with one skill, removed at exit."""
    root = Path(tempfile.mkdtemp(prefix="ctxgraph-bench-skills-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    (root / "greet").mkdir()
    (root / "greet" / "SKILL.md").write_text(SKILL, encoding="utf-8")
    return str(root)


def measure(repeats: int, env: dict[str, str], cli: list[str]) -> list[Command]:
    """Create the thread to show, warm every command up once, then time them interleaved."""
    run_id = f"bench-run-{uuid.uuid4().hex[:8]}"
    shown = f"bench-show-{uuid.uuid4().hex[:8]}"
    Command("setup", lambda _: [*cli, "run", "--user", "bench-user", "--thread", shown, TURN]).run(
        0, env
    )
    timed = commands(cli, shown, run_id, skill_folder())
    for command in timed:
        command.run(0, env)  # warm-up: bytecode caches, the OS file cache
    for number in range(1, repeats + 1):
        # Rotate the order, so no command always runs right after the same one.
        start = number % len(timed)
        for command in timed[start:] + timed[:start]:
            command.seconds.append(command.run(number, env))
        print(f"... round {number} of {repeats}", file=sys.stderr, flush=True)
    return timed


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def report(
    timed: Sequence[Command], repeats: int, database: str, cli: str, seconds: float
) -> tuple[str, bool]:
    """The Markdown report and whether every target is met."""
    baseline, help_command = timed[0], timed[1]
    ratio = help_command.median / baseline.median
    passed = ratio <= TARGET_RATIO
    lines = [
        f"# CLI start-up ({repeats} interleaved runs per command, median wall time)",
        "",
        f"Python {sys.version.split()[0]}; ctxgraph: {cli}; Postgres: {database}.",
        "",
        "| Command | Median | Min | Max | Ratio to baseline |",
        "|---|---:|---:|---:|---:|",
    ]
    for command in timed:
        lines.append(
            f"| {command.label} | {_ms(command.median)} | {_ms(min(command.seconds))} "
            f"| {_ms(max(command.seconds))} | {command.median / baseline.median:.2f}x |"
        )
    lines += [
        "",
        f"{'PASS' if passed else 'FAIL'} ctxgraph --help within {TARGET_RATIO:g}x the baseline: "
        f"{_ms(help_command.median)} vs {_ms(baseline.median)} ({ratio:.2f}x)",
    ]
    for command in timed:
        if command.target is None:
            continue
        met = command.median <= command.target
        passed = passed and met
        lines.append(
            f"{'PASS' if met else 'MISS'} {command.label} within {command.target:g} s: "
            f"{_ms(command.median)}"
        )
    lines.append(f"Elapsed: {seconds:.1f} s")
    return "\n".join(lines), passed


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its report; exit code 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="timed runs each")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    started = time.perf_counter()
    cli, shown_cli = ctxgraph_command()
    with database() as (database_env, described):
        timed = measure(args.repeats, child_env(database_env), cli)
    text, passed = report(timed, args.repeats, described, shown_cli, time.perf_counter() - started)
    print(text)
    sys.stdout.flush()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
