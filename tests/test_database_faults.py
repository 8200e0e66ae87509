"""Database faults end in one line and a non-zero exit; the next run recovers by itself."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ctxgraph.store.persistence import DatabaseError, database_errors, open_persistence
from ctxgraph.store.persistence.embedded import embedded_uri
from tests.support.cli import run_ctxgraph
from tests.support.embedded import postmaster_pid, start_holder, wait_until_gone


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _assert_one_line_exit_2(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    stderr = done.stderr
    assert done.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    for needle in needles:
        assert needle in stderr


@pytest.mark.parametrize(
    ("uri", "needles"),
    [
        ("not a uri", ("DATABASE_URI is not a valid Postgres URI",)),
        ("postgresql://x:secret@:bad", ("postgresql://…@:bad", "port")),
    ],
)
def test_malformed_database_uri_is_one_line(
    python: str, subprocess_env: dict[str, str], uri: str, needles: tuple[str, ...]
) -> None:
    env = {**subprocess_env, "DATABASE_URI": uri}
    done = run_ctxgraph(python, env, "run", "--user", "u", "--thread", "t", "hello")
    _assert_one_line_exit_2(done, *needles)
    assert "secret" not in done.stderr


def test_refused_connection_is_one_line(python: str, subprocess_env: dict[str, str]) -> None:
    port = _closed_port()
    env = {**subprocess_env, "DATABASE_URI": f"postgresql://me:secret@127.0.0.1:{port}/x"}
    done = run_ctxgraph(python, env, "run", "--user", "u", "--thread", "t", "hello")
    _assert_one_line_exit_2(done, f"127.0.0.1:{port}", "refused")
    assert "secret" not in done.stderr


def test_database_errors_turns_a_shutdown_mid_work_into_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    uri = embedded_uri(home)
    pgdata = home / "pgdata"
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with open_persistence(uri) as persistence:
        os.kill(postmaster_pid(pgdata), signal.SIGINT)  # what "pg_ctl stop -m fast" sends
        assert wait_until_gone(pgdata) == []
        with pytest.raises(DatabaseError) as raised, database_errors():
            persistence.checkpointer.get_tuple(config)  # type: ignore[arg-type]
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("cannot use the database at postgresql://…@/postgres?host=")
    assert str(pgdata) in message

    recovered = embedded_uri(home)
    with open_persistence(recovered) as persistence:
        assert persistence.checkpointer.get_tuple(config) is None  # type: ignore[arg-type]


def test_database_errors_leaves_other_errors_alone() -> None:
    with pytest.raises(ValueError, match="not a database fault"), database_errors("x"):
        raise ValueError("not a database fault")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches processes via /proc")
def test_server_killed_under_a_client_recovers_quietly(
    python: str, subprocess_env: dict[str, str], ctxgraph_home: Path
) -> None:
    env = {k: v for k, v in subprocess_env.items() if k != "DATABASE_URI"}
    env["CTXGRAPH_HOME"] = str(ctxgraph_home)
    pgdata = ctxgraph_home / "pgdata"
    holder = start_holder(python, env, ctxgraph_home)
    os.kill(postmaster_pid(pgdata), signal.SIGKILL)
    assert wait_until_gone(pgdata) == []
    _, errors = holder.communicate("", timeout=60)
    assert holder.returncode == 0
    assert errors == "", "the client printed shutdown noise for a dead server"

    done = run_ctxgraph(python, env, "run", "--user", "u", "--thread", "t", "hello")

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert wait_until_gone(pgdata) == []


def test_a_server_shut_down_mid_turn_ends_the_run_in_one_line_and_the_next_run_recovers(
    python: str, subprocess_env: dict[str, str], ctxgraph_home: Path
) -> None:
    """The embedded server is stopped while the model streams; the run's next write fails."""
    from tests.support.slow_server import SlowReply, SlowServer

    env = {k: v for k, v in subprocess_env.items() if k != "DATABASE_URI"}
    pgdata = ctxgraph_home / "pgdata"
    slow = SlowReply(tuple(f"word{i}" for i in range(12)), delay=0.25)
    with SlowServer(slow, SlowReply(("back", "again"))) as server:
        env.update(
            {
                "CTXGRAPH_HOME": str(ctxgraph_home),
                "CTXGRAPH_MODEL": "slow-model",
                "OPENAI_BASE_URL": server.base_url,
                "OPENAI_API_KEY": "test-key",
                "CTXGRAPH_MEMORY_EXTRACTION": "off",
                "CTXGRAPH_MEMORY_MODE": "off",
                "CTXGRAPH_MAX_RETRIES": "0",
            }
        )
        child = subprocess.Popen(
            [python, "-m", "ctxgraph.graph.cli", "run", "--user", "u", "--thread", "t", "hi"],
            env=env,
            cwd=str(Path(__file__).resolve().parent.parent),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        # The answer has started streaming: the turn's input is saved, its answer is not.
        seen = ""
        while "word1" not in seen:
            char = child.stdout.read(1)
            assert char, (seen, child.communicate(timeout=60))
            seen += char
        os.kill(postmaster_pid(pgdata), signal.SIGINT)  # a fast shutdown, as an admin would
        out, err = child.communicate(timeout=120)
        assert child.returncode == 2, (out, err)
        assert "Traceback" not in err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("ctxgraph: cannot use the database"), err

        again = run_ctxgraph(python, env, "run", "--user", "u", "--thread", "t", "once more")
        assert again.returncode == 0, again.stderr
        assert "Traceback" not in again.stderr
        assert "back again" in again.stdout
    assert wait_until_gone(pgdata) == []
