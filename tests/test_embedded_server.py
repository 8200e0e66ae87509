"""The embedded Postgres leaves folder modes alone and stops after its last live client."""

from __future__ import annotations

import os
import signal
import stat
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_ctxgraph
from tests.support.embedded import postgres_pids, start_holder, wait_until_gone

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="watches processes through /proc"
)


@pytest.fixture
def home_env(subprocess_env: dict[str, str], ctxgraph_home: Path) -> dict[str, str]:
    """Environment for a child on the embedded server of a fresh ``CTXGRAPH_HOME``."""
    env = {k: v for k, v in subprocess_env.items() if k != "DATABASE_URI"}
    env["CTXGRAPH_HOME"] = str(ctxgraph_home)
    return env


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs Postgres as another user")
def test_root_run_leaves_closed_parent_folders_closed(
    python: str, home_env: dict[str, str], ctxgraph_home: Path
) -> None:
    parent = ctxgraph_home.parent
    parent.chmod(0o700)
    grandparent_mode = _mode(parent.parent)

    done = run_ctxgraph(python, home_env, "run", "--user", "u", "--thread", "t", "hello")

    assert done.returncode == 0, done.stderr
    assert _mode(parent) == 0o700
    assert _mode(parent.parent) == grandparent_mode
    assert _mode(ctxgraph_home / "pgdata") == 0o700
    assert (ctxgraph_home / "pgdata").stat().st_uid != 0
    assert _mode(ctxgraph_home / "pgdata.clients") == 0o600
    assert wait_until_gone(ctxgraph_home / "pgdata") == []


def test_client_killed_with_sigkill_does_not_keep_the_server_alive(
    python: str, home_env: dict[str, str], ctxgraph_home: Path
) -> None:
    pgdata = ctxgraph_home / "pgdata"
    holder = start_holder(python, home_env, ctxgraph_home)
    assert postgres_pids(pgdata)
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=30)
    assert postgres_pids(pgdata), "the server stopped with its killed client"

    done = run_ctxgraph(python, home_env, "run", "--user", "u", "--thread", "t", "hello")

    assert done.returncode == 0, done.stderr
    assert wait_until_gone(pgdata) == []


def test_server_keeps_running_while_another_live_client_holds_it(
    python: str, home_env: dict[str, str], ctxgraph_home: Path
) -> None:
    pgdata = ctxgraph_home / "pgdata"
    holder = start_holder(python, home_env, ctxgraph_home)
    try:
        done = run_ctxgraph(python, home_env, "run", "--user", "u", "--thread", "t", "hello")
        assert done.returncode == 0, done.stderr
        assert postgres_pids(pgdata), "the server stopped while a client still used it"
    finally:
        _, errors = holder.communicate("", timeout=60)
    assert holder.returncode == 0
    assert errors == ""
    assert wait_until_gone(pgdata) == []
