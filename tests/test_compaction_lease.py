"""Compaction leases: one holder per thread, fencing tokens, expiry, on both backends."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres import PostgresStore
from psycopg.rows import dict_row

from ctxgraph.store.persistence.compaction_lease import (
    CompactionLeases,
    Lease,
    LocalLeases,
    PostgresLeases,
    leases_for,
    new_holder,
)
from ctxgraph.store.persistence.connection import Persistence, open_async_persistence
from tests.support.cli import start_python

KINDS = ["local", "postgres"]


@pytest.fixture(params=KINDS)
def leases(request: pytest.FixtureRequest) -> CompactionLeases:
    """Leases in this process, or in the session database."""
    if request.param == "local":
        return LocalLeases()
    persistence: Persistence = request.getfixturevalue("persistence")
    return PostgresLeases(persistence.store)


def wait_until_expired(leases: CompactionLeases, thread_id: str, limit: float = 3.0) -> None:
    deadline = time.monotonic() + limit
    while (state := leases.current(thread_id)) is not None and state.live:
        assert time.monotonic() < deadline, "the lease did not expire"
        time.sleep(0.05)


def test_one_holder_until_release_then_the_next_token(
    leases: CompactionLeases, thread_id: str
) -> None:
    assert leases.current(thread_id) is None
    first = leases.acquire(thread_id, "a", 30)
    assert first is not None
    assert (first.thread_id, first.holder, first.token) == (thread_id, "a", 1)
    assert first.expires_at > time.time() + 25
    assert leases.acquire(thread_id, "b", 30) is None
    state = leases.current(thread_id)
    assert state is not None
    assert (state.holder, state.token, state.live) == ("a", 1, True)
    assert state.expires_at == pytest.approx(first.expires_at, abs=1e-3)

    leases.release(first)
    released = leases.current(thread_id)
    assert released is not None
    assert (released.holder, released.token, released.live) == ("a", 1, False)
    assert leases.is_current(first)

    second = leases.acquire(thread_id, "b", 30)
    assert second is not None
    assert (second.holder, second.token) == ("b", 2)
    assert not leases.is_current(first)
    assert leases.is_current(second)


def test_an_expired_lease_is_taken_over_and_its_holder_fenced_off(
    leases: CompactionLeases, thread_id: str
) -> None:
    old = leases.acquire(thread_id, "crashed", 0.5)
    assert old is not None
    wait_until_expired(leases, thread_id)
    new = leases.acquire(thread_id, "successor", 30)
    assert new is not None
    assert new.token == old.token + 1

    assert leases.renew(old, 30) is None
    leases.release(old)
    state = leases.current(thread_id)
    assert state is not None
    assert (state.holder, state.token, state.live) == ("successor", new.token, True)
    assert leases.acquire(thread_id, "third", 30) is None
    assert not leases.is_current(old)
    assert leases.is_current(new)


def test_renew_extends_the_expiry(leases: CompactionLeases, thread_id: str) -> None:
    lease = leases.acquire(thread_id, "a", 1)
    assert lease is not None
    renewed = leases.renew(lease, 60)
    assert renewed is not None
    assert (renewed.thread_id, renewed.holder, renewed.token) == (thread_id, "a", lease.token)
    assert renewed.expires_at >= lease.expires_at + 58
    state = leases.current(thread_id)
    assert state is not None
    assert state.expires_at == pytest.approx(renewed.expires_at, abs=1e-3)
    assert leases.is_current(renewed)


def test_a_released_lease_cannot_be_renewed(leases: CompactionLeases, thread_id: str) -> None:
    lease = leases.acquire(thread_id, "a", 30)
    assert lease is not None
    leases.release(lease)
    assert leases.renew(lease, 30) is None


def test_bad_arguments_are_refused(leases: CompactionLeases, thread_id: str) -> None:
    with pytest.raises(ValueError, match="thread_id"):
        leases.acquire("", "a", 30)
    with pytest.raises(ValueError, match="holder"):
        leases.acquire(thread_id, "", 30)
    for ttl in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ttl_s"):
            leases.acquire(thread_id, "a", ttl)
    with pytest.raises(ValueError, match="thread_id"):
        leases.current("")
    lease = leases.acquire(thread_id, "a", 30)
    assert lease is not None
    with pytest.raises(ValueError, match="ttl_s"):
        leases.renew(lease, 0)


@pytest.fixture(params=["local", "postgres", "pooled"])
def racing_leases(request: pytest.FixtureRequest, database_uri: str) -> Iterator[CompactionLeases]:
    """Leases for concurrent callers: local, one shared connection, or a pool of eight."""
    if request.param == "local":
        yield LocalLeases()
    elif request.param == "postgres":
        persistence: Persistence = request.getfixturevalue("persistence")
        yield PostgresLeases(persistence.store)
    else:
        pool = {"min_size": 8, "max_size": 8}
        with PostgresStore.from_conn_string(database_uri, pool_config=pool) as store:
            yield PostgresLeases(store)


def test_eight_threads_race_and_one_wins(racing_leases: CompactionLeases, thread_id: str) -> None:
    start = threading.Barrier(8)

    def contend(n: int) -> Lease | None:
        start.wait()
        return racing_leases.acquire(thread_id, f"h{n}", 30)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(contend, range(8)))
    won = [lease for lease in results if lease is not None]
    assert len(won) == 1
    assert won[0].token == 1
    state = racing_leases.current(thread_id)
    assert state is not None
    assert (state.holder, state.token) == (won[0].holder, 1)


def test_eight_processes_race_on_a_new_database_and_one_wins(
    new_database: str, python: str, subprocess_env: dict[str, str]
) -> None:
    env = {**subprocess_env, "DATABASE_URI": new_database}
    thread = f"t-{uuid.uuid4().hex[:12]}"
    children = [
        start_python(python, env, "-m", "tests.support.lease_acquirer", thread, "30")
        for _ in range(8)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n", child.communicate(timeout=60)
        for child in children:  # all connected: the lease table is created in the race
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=120) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert [child.returncode for child in children] == [0] * 8, outputs
    assert Counter(out.strip() for out, _ in outputs) == {"token 1": 1, "busy": 7}, outputs


def test_a_non_autocommit_connection_commits_every_call(
    database_uri: str, persistence: Persistence, thread_id: str
) -> None:
    observer = PostgresLeases(persistence.store)
    with psycopg.connect(database_uri, autocommit=False, row_factory=dict_row) as conn:
        leases = PostgresLeases(PostgresStore(conn))
        conn.execute("SELECT 1")  # leaves a transaction open: now() would be its start
        time.sleep(0.6)
        lease = leases.acquire(thread_id, "a", 0.5)
        assert lease is not None
        state = observer.current(thread_id)
        assert state is not None
        assert (state.holder, state.token, state.live) == ("a", 1, True)
        assert observer.acquire(thread_id, "b", 30) is None
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_leases_for_picks_the_backend(persistence: Persistence) -> None:
    assert isinstance(leases_for(persistence.store), PostgresLeases)
    memory = InMemoryStore()
    local = leases_for(memory)
    assert isinstance(local, LocalLeases)
    # One set per process: a server hands each run a new Store object over the same data.
    assert leases_for(memory) is local
    assert leases_for(InMemoryStore()) is local
    assert leases_for(None) is local


def test_shared_local_leases_hold_across_callers(thread_id: str) -> None:
    memory = InMemoryStore()
    lease = leases_for(memory).acquire(thread_id, "a", 30)
    assert lease is not None
    assert leases_for(memory).acquire(thread_id, "b", 30) is None


def test_new_holder_names_host_and_process() -> None:
    first, second = new_holder(), new_holder()
    assert first != second
    host, pid, tag = first.split(":")
    assert host and pid.isdigit() and len(tag) == 8


async def run_async_scenario(leases: CompactionLeases, thread_id: str) -> None:
    assert await leases.acurrent(thread_id) is None
    first = await leases.aacquire(thread_id, "a", 0.5)
    assert first is not None and first.token == 1
    assert await leases.aacquire(thread_id, "b", 30) is None
    renewed = await leases.arenew(first, 30)
    assert renewed is not None and renewed.expires_at > first.expires_at + 25
    await leases.arelease(renewed)
    state = await leases.acurrent(thread_id)
    assert state is not None and (state.token, state.live) == (1, False)
    assert await leases.ais_current(first)
    second = await leases.aacquire(thread_id, "b", 30)
    assert second is not None and second.token == 2
    assert not await leases.ais_current(first)
    assert await leases.arenew(first, 30) is None
    await leases.arelease(first)
    state = await leases.acurrent(thread_id)
    assert state is not None and (state.holder, state.live) == ("b", True)
    with pytest.raises(ValueError, match="ttl_s"):
        await leases.aacquire(thread_id, "c", 0)


async def test_async_methods_on_each_backend(leases: CompactionLeases, thread_id: str) -> None:
    await run_async_scenario(leases, thread_id)


async def test_async_methods_on_an_async_postgres_store(database_uri: str, thread_id: str) -> None:
    async with open_async_persistence(database_uri) as persistence:
        leases = leases_for(persistence.store)
        assert isinstance(leases, PostgresLeases)
        await run_async_scenario(leases, thread_id)


async def test_async_expiry_on_an_async_postgres_store(database_uri: str, thread_id: str) -> None:
    async with open_async_persistence(database_uri) as persistence:
        leases = leases_for(persistence.store)
        old = await leases.aacquire(thread_id, "crashed", 0.5)
        assert old is not None
        deadline = time.monotonic() + 3
        while (state := await leases.acurrent(thread_id)) is not None and state.live:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        new = await leases.aacquire(thread_id, "successor", 30)
        assert new is not None and new.token == old.token + 1
        assert await leases.arenew(old, 30) is None
        assert not await leases.ais_current(old)


async def test_eight_coroutines_race_on_an_async_postgres_store(
    database_uri: str, thread_id: str
) -> None:
    async with open_async_persistence(database_uri) as persistence:
        leases = leases_for(persistence.store)
        results = await asyncio.gather(*(leases.aacquire(thread_id, f"h{n}", 30) for n in range(8)))
    assert [lease.token for lease in results if lease is not None] == [1]


async def test_sync_methods_over_an_async_store_work_from_other_threads(
    database_uri: str, thread_id: str
) -> None:
    async with open_async_persistence(database_uri) as persistence:
        leases = leases_for(persistence.store)
        lease = await asyncio.to_thread(leases.acquire, thread_id, "worker", 30)
        assert lease is not None and lease.token == 1
        assert await leases.aacquire(thread_id, "other", 30) is None

        seen: list[object] = []

        def worker() -> None:
            seen.append(leases.current(thread_id))
            seen.append(leases.renew(lease, 60))
            leases.release(lease)
            seen.append(leases.is_current(lease))

        runner = threading.Thread(target=worker)
        runner.start()
        while runner.is_alive():
            await asyncio.sleep(0.01)
        runner.join()
        state, renewed, current = seen
        assert state is not None and getattr(state, "holder", None) == "worker"
        assert isinstance(renewed, Lease) and renewed.token == 1
        assert current is True
        after = await leases.acurrent(thread_id)
        assert after is not None and not after.live


async def test_sync_methods_on_the_stores_own_loop_are_refused(
    database_uri: str, thread_id: str
) -> None:
    async with open_async_persistence(database_uri) as persistence:
        leases = leases_for(persistence.store)
        with pytest.raises(RuntimeError, match=r"await leases\.aacquire"):
            leases.acquire(thread_id, "a", 30)
        with pytest.raises(RuntimeError, match=r"await leases\.acurrent"):
            leases.current(thread_id)
        assert await leases.acurrent(thread_id) is None
