"""As root, Postgres installed and kept below a closed folder runs from a verified cached copy."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from ctxgraph.store.persistence import embedded, embedded_server, program_cache
from ctxgraph.store.persistence.embedded import EmbeddedPostgresError, embedded_uri
from ctxgraph.store.persistence.embedded_server import EmbeddedServer
from tests.support.embedded import copy_install, folder_modes, wait_until_gone

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not sys.platform.startswith("linux"),
    reason="only root on Linux runs Postgres as another user, who must reach its programs",
)


@dataclass
class Closed:
    """Programs and data folder below ``closed`` (mode 700); the cache beside it."""

    base: Path
    closed: Path
    install: Path
    home: Path
    cache: Path

    def server(self) -> EmbeddedServer:
        return EmbeddedServer(self.home, install=self.install, cache_roots=[self.cache])

    def copies(self) -> list[Path]:
        return sorted(p for p in self.cache.iterdir() if not p.name.startswith("."))


@pytest.fixture(scope="module")
def layout() -> Iterator[Closed]:
    """One copy of the programs below a closed folder, shared by the tests of this module."""
    base = Path(tempfile.mkdtemp(prefix="ctxgraph-root-"))
    base.chmod(0o755)  # our own folder: the cache below it must be reachable
    closed = base / "closed"
    closed.mkdir(mode=0o700)
    install = copy_install(closed / "site")
    yield Closed(base, closed, install, closed / "home", base / "cache")
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def closed(layout: Closed) -> Iterator[Closed]:
    """The layout; afterwards, no folder outside the cache and data folder changed mode."""
    layout.home.mkdir(exist_ok=True)
    before = folder_modes(layout.base, layout.cache, layout.home)
    yield layout
    assert wait_until_gone(layout.home / "pgdata") == []
    assert folder_modes(layout.base, layout.cache, layout.home) == before
    assert stat.S_IMODE(layout.closed.stat().st_mode) == 0o700


def _run_once(server: EmbeddedServer) -> int:
    """Join, query over the socket, leave; return the postmaster's pid."""
    uri = server.join()
    try:
        with psycopg.connect(uri) as connection:
            assert connection.execute("select 1").fetchone() == (1,)
        pid = server.postmaster_pid()
        assert pid is not None
        return pid
    finally:
        server.leave()


def test_server_below_a_closed_folder_starts_accepts_and_stops(closed: Closed) -> None:
    server = closed.server()
    uri = server.join()
    try:
        pgdata = closed.home / "pgdata"
        assert f"host={pgdata}&" in uri
        with psycopg.connect(uri) as connection:
            assert connection.execute("select current_user").fetchone() == ("postgres",)
        pid = server.postmaster_pid()
        assert pid is not None
        (copy,) = closed.copies()
        assert Path(os.readlink(f"/proc/{pid}/exe")).is_relative_to(copy)
        assert os.readlink(f"/proc/{pid}/cwd") == str(pgdata)
        assert (pgdata / "log").stat().st_size > 0
        assert stat.S_ISSOCK((pgdata / ".s.PGSQL.5432").stat().st_mode)
        assert pgdata.stat().st_uid != 0
    finally:
        server.leave()
    assert wait_until_gone(closed.home / "pgdata") == []


def test_second_start_reuses_the_copy_and_a_join_does_not_check_it(
    closed: Closed, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_once(closed.server())
    (copy,) = closed.copies()
    marker = copy.stat().st_ino, (copy / "pgserver" / "pginstall" / "bin" / "postgres").stat()

    first = closed.server()
    first.join()
    try:
        with monkeypatch.context() as patched:
            patched.setattr(program_cache, "cached_install", _must_not_run)
            # The server runs: joining it (as this same client again) touches no programs.
            uri = closed.server().join()
            with psycopg.connect(uri) as connection:
                assert connection.execute("select 1").fetchone() == (1,)
    finally:
        first.leave()

    assert closed.copies() == [copy]
    again = copy.stat().st_ino, (copy / "pgserver" / "pginstall" / "bin" / "postgres").stat()
    assert again == marker


def _must_not_run(*args: object) -> Path:
    raise AssertionError("the cached copy was checked to join a running server")


@pytest.mark.parametrize("tamper", ["content", "group-writable folder"])
def test_tampered_copy_is_rebuilt(closed: Closed, tamper: str) -> None:
    _run_once(closed.server())
    (copy,) = closed.copies()
    share = copy / "pgserver" / "pginstall" / "share" / "postgresql"
    sample = share / "pg_hba.conf.sample"
    original = sample.read_bytes()
    if tamper == "content":
        with sample.open("ab") as handle:
            handle.write(b"host all all 0.0.0.0/0 trust\n")
    else:
        share.chmod(0o775)

    _run_once(closed.server())

    (rebuilt,) = closed.copies()
    assert rebuilt == copy
    assert sample.read_bytes() == original
    assert stat.S_IMODE(share.stat().st_mode) == 0o755


def test_unusable_cache_folder_falls_back_to_the_next(closed: Closed, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    inside_closed = closed.closed / "cache"
    other = closed.base / "other-cache"
    account = closed.server()._account()
    assert account is not None

    found = program_cache.cached_install(
        closed.install,
        [blocker / "cache", inside_closed, other],
        lambda folder: embedded_server._closed_folder(folder, account, {account.gid}),
    )

    assert found.is_relative_to(other)
    assert (found / "bin" / "initdb").is_file()
    shutil.rmtree(other)
    shutil.rmtree(inside_closed)


def test_racing_builders_make_one_verified_copy(closed: Closed) -> None:
    root = closed.base / "race-cache"
    barrier = threading.Barrier(3)
    results: list[Path] = []

    def build() -> None:
        barrier.wait()
        results.append(program_cache.cached_install(closed.install, [root], lambda _: None))

    threads = [threading.Thread(target=build) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(results) == 3
    assert len(set(results)) == 1
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".")) == [".lock"]
    shutil.rmtree(root)


def test_no_reachable_copy_names_the_cause_and_the_fix(
    closed: Closed, monkeypatch: pytest.MonkeyPatch
) -> None:
    unusable = closed.closed / "cache"
    monkeypatch.setattr(embedded_server, "package_install", lambda: closed.install)
    monkeypatch.setattr(program_cache, "default_roots", lambda: (unusable,))
    home = closed.base / "failing-home"

    with pytest.raises(EmbeddedPostgresError) as raised:
        embedded_uri(home)

    message = str(raised.value)
    assert f"cannot reach its programs in {closed.install / 'bin'}" in message
    assert f"({closed.closed} is closed to it)" in message
    assert f"{unusable}: {closed.closed} is closed to the user who runs Postgres" in message
    assert f"make {unusable} a folder root can create" in message
    assert "set DATABASE_URI" in message
    assert "CTXGRAPH_HOME" not in message
    assert home / "pgdata" not in embedded._servers
    assert not (home / "pgdata" / "PG_VERSION").exists()
    shutil.rmtree(home)
    shutil.rmtree(unusable)
