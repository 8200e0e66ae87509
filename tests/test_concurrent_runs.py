"""Runs started together on one thread take turns: no accepted turn is lost or doubled.

Each race starts several ``ctxgraph run`` processes (or library callers) on one thread at
the same moment, then reads the thread back with ``ctxgraph threads show`` and checks it
with ``ctxgraph threads verify``. Some races use a small compaction trigger, so threads
are compacted while the runs queue for them.

``CTXGRAPH_RACE_REPS`` sets how many races of each size run (default 2: one without and one
with compaction; more for a longer soak).
"""

from __future__ import annotations

import contextlib
import io
import os
import textwrap
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from ctxgraph.graph.cli.main import main
from ctxgraph.store.persistence import open_persistence, thread_lock
from tests.support.race import ANSWER_LINE, USER_LINE, Finished, ctxgraph_command, gate, race

REPS = int(os.environ.get("CTXGRAPH_RACE_REPS", "2"))
"""Races per size. Each race is forced (see ``gate``): the test holds the thread until every
racer waits for it, then lets them all go at once, so every repetition is a real race for
the thread and one of each kind (with and without compaction) proves the guarantee that ten
unforced ones only made likely."""
SMALL_TRIGGER = {"CTXGRAPH_TRIGGER_MESSAGES": "12", "CTXGRAPH_KEEP_MESSAGES": "4"}
BUSY = "ctxgraph: thread {thread} is busy: another run holds it (waited {wait} s)"


@pytest.fixture
def cli_env(subprocess_env: dict[str, str], database_uri: str, monkeypatch) -> dict[str, str]:
    """Children and the in-process ``ctxgraph threads`` commands share the session database."""
    monkeypatch.setenv("DATABASE_URI", database_uri)
    return subprocess_env


def ctxgraph(*args: str) -> tuple[int, str, str]:
    """Run the ``ctxgraph`` entry point in this process; its status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return status, out.getvalue(), err.getvalue()


def question(number: int) -> str:
    return f"What is {number} * 7?"


def answer(number: int) -> str:
    return f"The calculator says {number * 7}."


def assert_thread_holds_exactly(thread: str, numbers: list[int]) -> str:
    """Every turn appears once in ``threads show`` and nothing else; the chain verifies."""
    status, shown, err = ctxgraph("threads", "show", thread)
    assert status == 0, err
    assert "Traceback" not in shown + err
    users = Counter(USER_LINE.findall(shown))
    answers = Counter(ANSWER_LINE.findall(shown))
    assert users == Counter(question(n) for n in numbers), shown
    assert answers == Counter(answer(n) for n in numbers), shown
    status, verified, err = ctxgraph("threads", "verify", thread)
    assert status == 0, verified + err
    assert "intact" in verified
    return shown


def assert_clean(finished: list[Finished]) -> None:
    for child in finished:
        assert "Traceback" not in child.output, child.output
        assert "UniqueViolation" not in child.output, child.output


@pytest.mark.parametrize("racers", [2, 4])
def test_racing_cli_runs_keep_every_turn_once(
    python: str, cli_env: dict[str, str], database_uri: str, racers: int
) -> None:
    assert REPS >= 2, "one race without and one with compaction"
    for rep in range(REPS):
        thread = f"race-{racers}-{rep}-{uuid.uuid4().hex[:8]}"
        env = dict(cli_env, **(SMALL_TRIGGER if rep % 2 else {}))
        per_racer = 8 // racers  # 8 turns, 32 messages per race: several compactions
        turns = {
            r: [1000 * (r + 1) + 10 * rep + k for k in range(per_racer)] for r in range(racers)
        }
        commands = [
            ctxgraph_command(
                python, "run", "--user", "racer", "--thread", thread, *map(question, numbers)
            )
            for numbers in turns.values()
        ]
        names = [f"{thread}-racer-{r}" for r in range(racers)]
        envs = [dict(env, PGAPPNAME=name) for name in names]  # how ``gate`` tells them apart
        with open_persistence(database_uri) as db, gate(db, thread, names) as held:
            finished = race(commands, envs, started=held.open_when_all_wait)

        assert_clean(finished)
        assert [child.returncode for child in finished] == [0] * racers, finished
        assert held.all_waited, "every racer waited for the thread before it was released"
        for child, numbers in zip(finished, turns.values(), strict=True):
            # One run's turns stay together: it holds the thread for all of them.
            assert [answer(n) for n in numbers] == [
                line.removeprefix("assistant: ")
                for line in child.stdout.splitlines()
                if line.startswith("assistant: ")
            ]
        shown = assert_thread_holds_exactly(thread, [n for ns in turns.values() for n in ns])
        if rep % 2:
            assert "compaction v1" in shown


def test_racer_that_waits_too_long_exits_3_and_writes_nothing(
    python: str, cli_env: dict[str, str], database_uri: str
) -> None:
    thread = f"race-busy-{uuid.uuid4().hex[:8]}"
    run = ("run", "--user", "racer", "--thread", thread)
    with open_persistence(database_uri) as persistence:
        patient = race([ctxgraph_command(python, *run, question(1))], [cli_env])
        assert patient[0].returncode == 0, patient[0].output  # the thread exists now
        with thread_lock(persistence, thread):
            finished = race(
                [
                    ctxgraph_command(python, *run, "--wait", "0.2", question(2)),
                    ctxgraph_command(python, *run, question(3)),
                ],
                [cli_env, dict(cli_env, CTXGRAPH_THREAD_WAIT="0.3")],
            )
    assert_clean(finished)
    for child, wait in zip(finished, ("0.2", "0.3"), strict=True):
        assert child.returncode == 3, child.output
        assert child.stdout == ""
        assert child.stderr.splitlines() == [BUSY.format(thread=thread, wait=wait)]
    assert_thread_holds_exactly(thread, [1])


def test_small_wait_among_racers_either_runs_or_exits_3(
    python: str, cli_env: dict[str, str]
) -> None:
    thread = f"race-wait-{uuid.uuid4().hex[:8]}"
    numbers = [7000 + r for r in range(3)]
    commands = [
        ctxgraph_command(
            python, "run", "--user", "racer", "--thread", thread, "--wait", "0", question(n)
        )
        for n in numbers
    ]
    finished = race(commands, [cli_env] * len(commands))

    assert_clean(finished)
    accepted = [n for n, child in zip(numbers, finished, strict=True) if child.returncode == 0]
    for child in finished:
        assert child.returncode in (0, 3), child.output
        if child.returncode == 3:
            assert child.stdout == ""
            assert child.stderr.splitlines() == [BUSY.format(thread=thread, wait="0")]
    assert accepted
    assert_thread_holds_exactly(thread, accepted)


def test_two_chats_on_one_thread_take_turns(python: str, cli_env: dict[str, str]) -> None:
    thread = f"race-chat-{uuid.uuid4().hex[:8]}"
    numbers = {name: [100 * name + k for k in range(3)] for name in (1, 2)}
    env = dict(cli_env, **SMALL_TRIGGER)
    finished = race(
        [ctxgraph_command(python, "chat", "--user", "racer", "--thread", thread)] * 2,
        [env, env],
        stdin=["\n".join(map(question, ns)) + "\n" for ns in numbers.values()],
    )

    assert_clean(finished)
    assert [child.returncode for child in finished] == [0, 0], finished
    assert_thread_holds_exactly(thread, [n for ns in numbers.values() for n in ns])


def test_racers_on_a_fresh_data_folder_all_succeed(
    python: str, subprocess_env: dict[str, str], ctxgraph_home: Path
) -> None:
    env = {k: v for k, v in subprocess_env.items() if k != "DATABASE_URI"}
    env["CTXGRAPH_HOME"] = str(ctxgraph_home)
    thread = "fresh"
    numbers = [11, 12, 13]
    commands = [
        ctxgraph_command(python, "run", "--user", "racer", "--thread", thread, question(n))
        for n in numbers
    ]
    finished = race(commands, [env] * len(commands))

    assert_clean(finished)
    assert [child.returncode for child in finished] == [0, 0, 0], finished
    shown = race([ctxgraph_command(python, "threads", "show", thread)], [env])[0]
    assert shown.returncode == 0, shown.output
    assert Counter(USER_LINE.findall(shown.stdout)) == Counter(map(question, numbers))


SETUP_CHILD = textwrap.dedent(
    """
    import asyncio
    import sys
    import time

    from ctxgraph.store.persistence import open_async_persistence, open_persistence

    uri, start, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    config = {"configurable": {"thread_id": "none"}}


    async def open_async():
        async with open_async_persistence(uri) as persistence:
            await persistence.checkpointer.aget_tuple(config)


    time.sleep(max(0.0, start - time.time()))  # start together, imports done
    if mode == "async":
        asyncio.run(open_async())
    else:
        with open_persistence(uri) as persistence:
            persistence.checkpointer.get_tuple(config)
    print("ready")
    """
)


def test_processes_set_up_a_new_database_together(
    python: str, subprocess_env: dict[str, str], new_database: str
) -> None:
    env = {k: v for k, v in subprocess_env.items() if k != "DATABASE_URI"}
    assert conninfo_to_dict(new_database)["dbname"].startswith("ctxgraph_new_")
    start = str(time.time() + 3)
    modes = ("sync", "async", "sync", "async")
    finished = race(
        [[python, "-c", SETUP_CHILD, new_database, start, mode] for mode in modes],
        [env] * len(modes),
    )

    assert_clean(finished)
    assert [(child.returncode, child.stdout) for child in finished] == [(0, "ready\n")] * 4


def test_library_callers_in_thread_lock_keep_every_turn(
    python: str, cli_env: dict[str, str], database_uri: str
) -> None:
    thread = f"race-lib-{uuid.uuid4().hex[:8]}"
    turns = 4
    names = ("81", "82")
    finished = race(
        [
            [python, "-m", "tests.support.lock_child", database_uri, thread, name, str(turns)]
            for name in names
        ],
        [cli_env] * len(names),
    )

    assert_clean(finished)
    assert [child.returncode for child in finished] == [0] * len(names), finished
    numbers = [int(f"{name}{k}") for name in names for k in range(turns)]
    for child, name in zip(finished, names, strict=True):
        assert child.stdout.splitlines() == [
            f"turn {name}{k}: {answer(int(f'{name}{k}'))}" for k in range(turns)
        ]
    shown = assert_thread_holds_exactly(thread, numbers)
    assert "compaction v1" in shown
