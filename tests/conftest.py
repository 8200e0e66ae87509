"""Shared fixtures: a real Postgres (embedded by default, DATABASE_URI when set)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ctxgraph.store.persistence.connection import Persistence, open_persistence
from ctxgraph.store.persistence.embedded import embedded_uri
from tests.support.cli import REPO_ROOT

pytest_plugins = ["tests.support.stores"]
"""Fixtures shared by several test modules: ``backend`` (a Store, in memory or Postgres)."""


def _outside_pytest_tmp() -> Path:
    """A new folder outside pytest's temp root.

    As root, the embedded Postgres runs as its own user and opens the parent folders to
    it; pytest closes its temp root again whenever another session starts, so data folders
    live elsewhere.
    """
    return Path(tempfile.mkdtemp(prefix="ctxgraph-test-"))


@pytest.fixture(scope="session")
def database_uri() -> Iterator[str]:
    """A Postgres URI for the whole test session (of this worker, under pytest-xdist).

    Each xdist worker starts its own embedded server; with ``DATABASE_URI`` set, each
    worker gets a database of its own on that server, so no two workers share tables.
    """
    configured = os.environ.get("DATABASE_URI", "").strip()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if configured and not worker:
        yield configured
        return
    if configured:
        dbname = conninfo_to_dict(configured).get("dbname") or "postgres"
        with _worker_database(configured, f"{dbname}_{worker}") as uri:
            yield uri
        return
    home = _outside_pytest_tmp()
    # Registered before the server starts, so it runs after the server's own stop at exit.
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    yield embedded_uri(home)


@contextmanager
def _worker_database(server_uri: str, name: str) -> Iterator[str]:
    """A fresh database ``name`` on ``server_uri``'s server for one worker, dropped afterwards."""
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(server_uri, autocommit=True) as conn:
        conn.execute(drop)  # left over from an interrupted run
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(server_uri, dbname=name)
    finally:
        with psycopg.connect(server_uri, autocommit=True) as conn:
            conn.execute(drop)


@pytest.fixture
def new_database(database_uri: str) -> Iterator[str]:
    """A database of its own on the session server (no ctxgraph tables yet), dropped afterwards."""
    name = f"ctxgraph_new_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(database_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(database_uri, dbname=name)
    finally:
        with psycopg.connect(database_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def ctxgraph_home() -> Iterator[Path]:
    """An empty data folder for a child process's embedded Postgres, removed afterwards."""
    home = _outside_pytest_tmp()
    yield home / "home"
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_background_memory_left() -> Iterator[None]:
    """A test's background memory extractions end with it (their logs stay in its caplog)."""
    yield
    from ctxgraph.nodes.memory.runner import wait_for_memory

    wait_for_memory(BACKGROUND_MEMORY_WAIT)


BACKGROUND_MEMORY_WAIT = 30.0
"""Seconds a test's background memory extractions get after it (fakes take milliseconds)."""


@pytest.fixture
def persistence(database_uri: str) -> Iterator[Persistence]:
    """A Postgres checkpointer and Store on the session database."""
    with open_persistence(database_uri) as opened:
        yield opened
        from ctxgraph.nodes.memory.runner import wait_for_memory

        wait_for_memory(BACKGROUND_MEMORY_WAIT)  # before the Store they write to closes


@pytest.fixture
def thread_id() -> str:
    """A thread id no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def subprocess_env(database_uri: str) -> dict[str, str]:
    """Environment for a child ctxgraph process on the session database, offline model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(
        {
            "DATABASE_URI": database_uri,
            "CTXGRAPH_MODEL": "scripted",
            # A child's start extracts the due memory items of every thread in the database:
            # not the ones other tests left queued in the last half hour.
            "CTXGRAPH_MEMORY_QUIET_SECONDS": "1800",
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@pytest.fixture(scope="session")
def python() -> str:
    """The interpreter running the tests (children use the same environment)."""
    return sys.executable
