"""Starts several child processes at once and collects what each printed and returned.

``gate`` forces a race: it holds a thread's lock until every child waits for it.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import psycopg

from ctxgraph.store.persistence.advisory import SETUP_LOCKS
from ctxgraph.store.persistence.connection import Persistence
from ctxgraph.store.persistence.thread_lock import thread_lock
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
    started: Callable[[], object] | None = None,
) -> list[Finished]:
    """Start every command before waiting for any, then wait for all of them.

    ``started`` is called once every child has been started, before any is waited for.
    """
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
        if started is not None:
            started()
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


WAITING_FOR_A_LOCK = """
SELECT a.application_name, a.pid
FROM pg_stat_activity a
WHERE a.application_name = ANY(%s)
  AND a.query LIKE 'SELECT pg_try_advisory_lock(%%'
  AND a.query_start > now() - interval '1 second'
  AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory')
"""
"""Connections of the named clients that are polling for an advisory lock they do not hold.

A waiter polls ``pg_try_advisory_lock`` every 10-100 ms (see ``advisory``), so its last
statement is that one and started less than a second ago.
"""

SETUP_LOCK_HELD = """
SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND classid = %s
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
"""Whether a process holds the lock that serializes creating the tables in this database."""


class Gate:
    """Holds a thread's lock until every named client waits for it (see ``gate``)."""

    def __init__(
        self,
        persistence: Persistence,
        names: Sequence[str],
        timeout: float,
        release: Callable[[], object],
    ) -> None:
        self._persistence = persistence
        self._names = list(names)
        self._timeout = timeout
        self._release = release
        self.all_waited = False
        """True when every client was seen waiting for the lock before it was released."""

    def open_when_all_wait(self) -> None:
        """Release the lock once every client waits for it, or after the timeout."""
        try:
            self.all_waited = self._wait_for_all()
        finally:
            self._release()

    def _wait_for_all(self) -> bool:
        """Whether every client came to poll for a lock it does not hold before the timeout.

        The tables are created under another advisory lock before a run takes its
        thread's lock, so the clients count as waiting for the thread only while no one
        holds that setup lock, on three checks in a row by the same connections.
        """
        deadline = time.monotonic() + self._timeout
        seen: list[frozenset[tuple[str, int]]] = []
        with psycopg.connect(self._persistence.uri, autocommit=True) as conn:
            while time.monotonic() < deadline:
                rows = conn.execute(WAITING_FOR_A_LOCK, (self._names,)).fetchall()
                setup = conn.execute(SETUP_LOCK_HELD, (SETUP_LOCKS,)).fetchone()
                waiting = frozenset((str(name), int(pid)) for name, pid in rows)
                everyone = {name for name, _ in waiting} == set(self._names)
                if everyone and setup is not None and setup[0] == 0:
                    seen.append(waiting)
                    if len(seen) >= 3 and len(set(seen[-3:])) == 1:
                        return True
                else:
                    seen.clear()
                time.sleep(0.1)
        return False


@contextmanager
def gate(
    persistence: Persistence, thread_id: str, names: Sequence[str], *, timeout: float = 60
) -> Iterator[Gate]:
    """Hold ``thread_id``'s lock until ``Gate.open_when_all_wait`` (or the block) ends.

    Clients are told apart by their Postgres ``application_name``: start each with
    ``PGAPPNAME`` set to its name, and pass ``open_when_all_wait`` as ``race``'s
    ``started``. Releasing the lock to clients that all wait for it forces the race for
    it on every try, instead of hoping that processes started together happen to overlap.
    """
    with ExitStack() as held:
        held.enter_context(thread_lock(persistence, thread_id, wait=0))
        yield Gate(persistence, names, timeout, held.close)
