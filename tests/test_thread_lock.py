"""``thread_lock`` / ``athread_lock``: one holder per thread, bounded waits, released on death."""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import signal
import subprocess
import textwrap
import threading
import time
from types import SimpleNamespace

import psycopg
import pytest

from ctxgraph.graph.cli.main import THREAD_BUSY_EXIT, USER_ERROR_EXIT, main, thread_wait
from ctxgraph.store.persistence import (
    DEFAULT_WAIT,
    DatabaseError,
    Persistence,
    ThreadBusyError,
    ThreadLockError,
    athread_lock,
    thread_lock,
)
from ctxgraph.store.persistence.advisory import THREAD_LOCKS, thread_key
from tests.support.cli import REPO_ROOT, run_ctxgraph


def busy(thread: str, wait: str) -> str:
    return f"thread {thread} is busy: another run holds it (waited {wait} s)"


def test_a_second_holder_is_refused_at_once_with_wait_0(
    persistence: Persistence, thread_id: str
) -> None:
    with thread_lock(persistence, thread_id, wait=0):
        started = time.monotonic()
        with pytest.raises(ThreadBusyError) as refused, thread_lock(persistence, thread_id, wait=0):
            pytest.fail("two holders of one thread")
        assert time.monotonic() - started < 1
    assert str(refused.value) == busy(thread_id, "0")
    assert isinstance(refused.value, ThreadLockError)
    assert (refused.value.thread_id, refused.value.waited) == (thread_id, 0.0)


def test_a_waiter_gives_up_after_its_wait(persistence: Persistence, thread_id: str) -> None:
    with thread_lock(persistence, thread_id):
        started = time.monotonic()
        with (
            pytest.raises(ThreadBusyError, match=r"\(waited 0\.4 s\)$"),
            thread_lock(persistence, thread_id, wait=0.4),
        ):
            pytest.fail("two holders of one thread")
        waited = time.monotonic() - started
    assert 0.4 <= waited < 2


def test_the_lock_is_free_again_after_the_block(persistence: Persistence, thread_id: str) -> None:
    with thread_lock(persistence, thread_id):
        pass
    with pytest.raises(RuntimeError, match="boom"), thread_lock(persistence, thread_id):
        raise RuntimeError("boom")
    with thread_lock(persistence, thread_id, wait=0):
        pass


def test_a_waiter_gets_the_lock_when_the_holder_releases_it(
    persistence: Persistence, thread_id: str
) -> None:
    events: list[str] = []

    def waiter() -> None:
        with thread_lock(persistence, thread_id, wait=10):
            events.append("waiter")

    with thread_lock(persistence, thread_id):
        second = threading.Thread(target=waiter)
        second.start()
        time.sleep(0.3)
        events.append("holder done")
    second.join(timeout=10)
    assert events == ["holder done", "waiter"]


def test_threads_do_not_block_each_other(persistence: Persistence, thread_id: str) -> None:
    with (
        thread_lock(persistence, thread_id, wait=0),
        thread_lock(persistence, thread_id + "-other", wait=0),
    ):
        pass


def test_the_lock_is_namespaced_and_visible_in_pg_locks(
    persistence: Persistence, thread_id: str
) -> None:
    first, second = thread_key(thread_id)
    assert first == THREAD_LOCKS
    assert thread_key(thread_id) == (first, second)  # stable within and across processes
    with psycopg.connect(persistence.uri, autocommit=True) as other:
        # A one-key advisory lock on the same number lives in another key space.
        other.execute("SELECT pg_advisory_lock(%s)", (second,))
        with thread_lock(persistence, thread_id, wait=0):
            held = other.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND classid = %s::bigint::oid AND objid = (%s::bigint & 4294967295)::oid "
                "AND objsubid = 2",
                (first, second),
            ).fetchone()
        other.execute("SELECT pg_advisory_unlock(%s)", (second,))
    assert held == (1,)


def test_a_key_is_a_fixed_function_of_the_thread_id() -> None:
    # The same in every process, Python version and hash seed.
    assert thread_key("work-1") == (THREAD_LOCKS, -254072646)
    assert thread_key("线程-1") == (THREAD_LOCKS, 1029773906)
    assert int.from_bytes(b"ctxT", "big") == THREAD_LOCKS


HOLDER = textwrap.dedent(
    """
    import sys
    import time

    from ctxgraph.store.persistence import open_persistence, thread_lock

    with open_persistence(sys.argv[1]) as persistence, thread_lock(persistence, sys.argv[2]):
        print("holding", flush=True)
        time.sleep(120)
    """
)


def test_postgres_releases_the_lock_when_the_holder_dies(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, thread_id: str
) -> None:
    holder = subprocess.Popen(
        [python, "-c", HOLDER, persistence.uri, thread_id],
        cwd=REPO_ROOT,
        env=subprocess_env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "holding\n"
        with pytest.raises(ThreadBusyError), thread_lock(persistence, thread_id, wait=0):
            pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        with thread_lock(persistence, thread_id, wait=10):
            pass
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


async def test_async_and_sync_holders_exclude_each_other(
    persistence: Persistence, thread_id: str
) -> None:
    async with athread_lock(persistence, thread_id, wait=0):
        with pytest.raises(ThreadBusyError, match=r"\(waited 0\.2 s\)$"):
            await asyncio.to_thread(_hold_briefly, persistence, thread_id, 0.2)
        with pytest.raises(ThreadBusyError, match=r"\(waited 0 s\)$"):
            async with athread_lock(persistence, thread_id, wait=0):
                pytest.fail("two holders of one thread")
    with (
        thread_lock(persistence, thread_id, wait=0),
        pytest.raises(ThreadBusyError, match=r"\(waited 0\.2 s\)$"),
    ):
        async with athread_lock(persistence, thread_id, wait=0.2):
            pytest.fail("two holders of one thread")
    async with athread_lock(persistence, thread_id, wait=0):
        pass


def _hold_briefly(persistence: Persistence, thread_id: str, wait: float) -> None:
    with thread_lock(persistence, thread_id, wait=wait):
        pytest.fail("two holders of one thread")


async def test_an_async_waiter_gets_the_lock_when_the_holder_releases_it(
    persistence: Persistence, thread_id: str
) -> None:
    order: list[str] = []

    async def waiter() -> None:
        async with athread_lock(persistence, thread_id, wait=10):
            order.append("waiter")

    async with athread_lock(persistence, thread_id):
        task = asyncio.create_task(waiter())
        await asyncio.sleep(0.3)
        order.append("holder done")
    await asyncio.wait_for(task, timeout=10)
    assert order == ["holder done", "waiter"]


@pytest.mark.parametrize("wait", [-1, math.nan, math.inf, "3", None, True])
def test_a_wait_that_is_not_a_non_negative_number_is_refused(
    persistence: Persistence, thread_id: str, wait: object
) -> None:
    with (
        pytest.raises(ValueError, match=r"^wait must be a .*got "),
        thread_lock(persistence, thread_id, wait=wait),
    ):
        pytest.fail("locked with an invalid wait")


def test_an_unreachable_database_is_a_database_error(thread_id: str) -> None:
    nowhere = SimpleNamespace(uri="postgresql://nobody@127.0.0.1:9/none?connect_timeout=2")
    with (
        pytest.raises(DatabaseError, match=r"^cannot use the database at postgresql://…@127"),
        thread_lock(nowhere, thread_id),
    ):
        pytest.fail("locked without a database")


def test_thread_wait_reads_the_option_then_the_variable() -> None:
    assert thread_wait(None, {}) == DEFAULT_WAIT == 30.0
    assert thread_wait(None, {"CTXGRAPH_THREAD_WAIT": " "}) == 30.0
    assert thread_wait(None, {"CTXGRAPH_THREAD_WAIT": "2.5"}) == 2.5
    assert thread_wait("0", {"CTXGRAPH_THREAD_WAIT": "2.5"}) == 0.0


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (["--wait", "-1"], {}, "--wait must be a non-negative number of seconds, got '-1'"),
        (["--wait", "soon"], {}, "--wait must be a non-negative number of seconds, got 'soon'"),
        (["--wait", "nan"], {}, "--wait must be a non-negative number of seconds, got 'nan'"),
        (
            [],
            {"CTXGRAPH_THREAD_WAIT": "soon"},
            "CTXGRAPH_THREAD_WAIT must be a non-negative number of seconds, got 'soon'",
        ),
    ],
)
def test_a_bad_wait_is_a_one_line_user_error(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], environ: dict[str, str], message: str
) -> None:
    monkeypatch.setenv("CTXGRAPH_MODEL", "scripted")
    monkeypatch.setenv("DATABASE_URI", "postgresql://nobody@127.0.0.1:9/none")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as out:
        status = main(["run", "--user", "u", "--thread", "t", *argv, "hello"])
    assert status == USER_ERROR_EXIT == 2
    assert err.getvalue() == f"ctxgraph: {message}\n"
    assert out.getvalue() == ""


def test_cli_run_on_a_held_thread_exits_3_with_one_line_and_writes_nothing(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, thread_id: str
) -> None:
    with thread_lock(persistence, thread_id):
        started = time.monotonic()
        child = run_ctxgraph(
            python,
            subprocess_env,
            "run",
            "--user",
            "u",
            "--thread",
            thread_id,
            "--wait",
            "0.5",
            "What is 6 * 7?",
        )
        elapsed = time.monotonic() - started
    assert child.returncode == THREAD_BUSY_EXIT == 3, child.stderr
    assert child.stderr == f"ctxgraph: {busy(thread_id, '0.5')}\n"
    assert child.stdout == ""
    assert elapsed >= 0.5
    config = {"configurable": {"thread_id": thread_id}}
    assert persistence.checkpointer.get_tuple(config) is None


def test_cli_chat_turn_on_a_held_thread_exits_3(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, thread_id: str
) -> None:
    env = dict(subprocess_env, CTXGRAPH_THREAD_WAIT="0.3")
    chat = ("chat", "--user", "u", "--thread", thread_id)
    with thread_lock(persistence, thread_id):
        child = run_ctxgraph(python, env, *chat, stdin="What is 6 * 7?\n")
    assert child.returncode == 3, child.stderr
    assert child.stderr == f"ctxgraph: {busy(thread_id, '0.3')}\n"
    assert "assistant:" not in child.stdout
    config = {"configurable": {"thread_id": thread_id}}
    assert persistence.checkpointer.get_tuple(config) is None
