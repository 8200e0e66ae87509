"""The embedded Postgres server: one per data folder, shared by processes, stopped by the last.

Files under ``CTXGRAPH_HOME`` (nothing outside it is created or has its mode changed,
except a socket folder in the temp folder when the data folder's path is too long for a
Unix socket, and, as root, the copy of the programs described in ``program_cache``):

* ``pgdata/`` (mode 700): the database cluster. As root it belongs to the ``pgserver``
  user, because Postgres refuses to run as root.
* ``pgdata.lock`` (mode 600): serialises starting, joining and stopping the server.
* ``pgdata.clients`` (mode 600): the processes using the server, as ``[pid, start time]``
  pairs. A process that died without leaving (killed with SIGKILL) is pruned, so the
  last live process always stops the server.

As root, Postgres runs as ``pgserver`` but starts inside the data folder and names it
``/proc/self/cwd`` (for the cluster, its log and its socket), so it never has to traverse
the folders above it: their modes stay as they are, even when they are closed to other
users (a home folder with mode 700). Its programs must be reachable by path, though: when
they are installed below such a folder, a root-owned copy is made (``program_cache``).
Whether the programs are reachable is checked only when the server has to be created or
started; joining a running server reads ``postmaster.pid`` and nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

SERVICE_USER = "pgserver"
"""The system user that runs Postgres when ctxgraph runs as root."""

START_WAIT = 30.0
"""Seconds to wait for the server to accept connections."""

STOP_WAIT = 10.0
"""Seconds to wait for a fast shutdown before the server is killed."""

_SOCKET_NAME = ".s.PGSQL.5432"
_SOCKET_PATH_MAX = 107
_HERE = "/proc/self/cwd"


class ServerError(RuntimeError):
    """The embedded server could not be prepared or started; ``remedy`` says what to do."""

    def __init__(self, message: str, *, remedy: str = "") -> None:
        """``message`` names the cause; ``remedy`` the one fix inside ctxgraph, if any."""
        super().__init__(message)
        self.remedy = remedy


@dataclass(frozen=True)
class _Account:
    uid: int
    gid: int


def package_install() -> Path:
    """The Postgres installation (``bin``, ``lib``, ``share``) of the ``pgserver`` package."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError(
            "the pgserver package is not installed",
            remedy="reinstall ctxgraph with its dependencies",
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def _closed_folder(folder: Path, account: _Account, groups: set[int]) -> Path | None:
    """The first folder on the way to ``folder`` that ``account`` cannot traverse, or None."""
    for part in reversed([folder, *folder.parents]):
        mode = part.stat()
        if mode.st_uid == account.uid:
            ok = bool(mode.st_mode & 0o100)
        elif mode.st_gid in groups:
            ok = bool(mode.st_mode & 0o010)
        else:
            ok = bool(mode.st_mode & 0o001)
        if not ok:
            return part
    return None


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """State letter and start time (clock ticks after boot) of ``pid`` from ``/proc``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def process_alive(pid: int, started: int | None = None) -> bool:
    """Whether ``pid`` runs (not a zombie) and, given ``started``, is the same process."""
    if Path("/proc/self/stat").exists():
        stat = _proc_stat(pid)
        if stat is None or stat[0] in "ZXx":
            return False
        return started is None or started in (0, stat[1])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _started(pid: int) -> int:
    """The start time of ``pid`` (0 where ``/proc`` is missing: pid reuse goes undetected)."""
    stat = _proc_stat(pid)
    return 0 if stat is None else stat[1]


class EmbeddedServer:
    """The Postgres server whose cluster lives in ``home / "pgdata"``."""

    def __init__(
        self,
        home: Path,
        *,
        install: Path | None = None,
        cache_roots: Sequence[Path] | None = None,
    ) -> None:
        """Describe the server of ``home``; nothing is started yet.

        Args:
            home: the data folder (``CTXGRAPH_HOME``).
            install: the Postgres installation to run; None for the ``pgserver`` package's.
            cache_roots: where, as root, a copy of an unreachable ``install`` may go;
                None for ``program_cache.default_roots()``.

        """
        self.home = home
        self.pgdata = home / "pgdata"
        self.lock_path = home / "pgdata.lock"
        self.clients_path = home / "pgdata.clients"
        self._install = install
        self._cache_roots = cache_roots
        self._joined = False

    def join(self) -> str:
        """Start the server unless it runs, count this process as a client; return the URI.

        Returns:
            The ``postgresql://`` URI of the server (over its Unix socket).

        Raises:
            ServerError: the server could not be created or started (``remedy`` says
                what to do).
            OSError: the data folder could not be created or written.

        """
        with self._locked():
            account = self._account()
            self._prepare_folder(account)
            uri = self._running_uri()
            if uri is None:
                bin_dir = self._programs(account)
                if not (self.pgdata / "PG_VERSION").exists():
                    self._initdb(account, bin_dir)
                uri = self._start(account, bin_dir)
            self._write_clients([*self._live_clients(), (os.getpid(), _started(os.getpid()))])
        self._joined = True
        return uri

    def leave(self) -> None:
        """Stop counting this process; stop the server if no live client remains."""
        if not self._joined:
            return
        self._joined = False
        with self._locked():
            others = [c for c in self._live_clients() if c[0] != os.getpid()]
            self._write_clients(others)
            if not others:
                self.stop()

    def leave_quietly(self) -> None:
        """``leave`` for interpreter exit: failures are not reported (the next run recovers)."""
        with contextlib.suppress(BaseException):
            self.leave()

    def postmaster_pid(self) -> int | None:
        """The pid of the running postmaster, or None."""
        info = self._postmaster_lines()
        if info is None:
            return None
        pid = int(info[0])
        return pid if process_alive(pid) else None

    def stop(self) -> None:
        """Fast shutdown of the server (SIGINT), then SIGQUIT and SIGKILL if it lingers."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        for sig, wait in ((signal.SIGINT, STOP_WAIT), (signal.SIGQUIT, 2.0), (signal.SIGKILL, 2.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not process_alive(pid):
                    return
                time.sleep(0.05)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _account(self) -> _Account | None:
        """The account Postgres runs as: None for this process's own user."""
        if os.geteuid() != 0:
            return None
        if not sys.platform.startswith("linux"):
            raise ServerError(
                "as root, the embedded Postgres runs only on Linux",
                remedy="run ctxgraph as a regular user",
            )
        import pwd

        try:
            entry = pwd.getpwnam(SERVICE_USER)
        except KeyError:
            command = ["useradd", "--system", "--no-create-home", "--shell", "/bin/false"]
            try:
                subprocess.run([*command, SERVICE_USER], check=True, capture_output=True)
                entry = pwd.getpwnam(SERVICE_USER)
            except (OSError, subprocess.CalledProcessError, KeyError) as error:
                output = getattr(error, "stderr", b"") or b""
                detail = output.decode(errors="replace").strip() or str(error)
                raise ServerError(
                    f"as root, Postgres runs as the user {SERVICE_USER!r}, which does not exist "
                    f"and could not be created: {detail}",
                    remedy=f"create it (useradd --system {SERVICE_USER}), or run ctxgraph as "
                    "a regular user",
                ) from error
        return _Account(entry.pw_uid, entry.pw_gid)

    def _programs(self, account: _Account | None) -> Path:
        """The ``bin`` folder to run Postgres from: as root, one ``account`` can reach.

        Args:
            account: the account Postgres runs as (None: this process's own user).

        Returns:
            The installation's own ``bin``, or, when ``account`` cannot reach it, the
            ``bin`` of a verified root-owned copy (see ``program_cache``).

        Raises:
            ServerError: no copy could be made; the message says why for each cache folder.

        """
        install = self._install or package_install()
        if account is None:
            return install / "bin"
        import grp

        members = {g.gr_gid for g in grp.getgrall() if SERVICE_USER in g.gr_mem}
        groups = members | {account.gid}
        blocked = _closed_folder(install / "bin", account, groups)
        if blocked is None:
            return install / "bin"
        from ctxgraph.store.persistence import program_cache  # only to start a server

        roots = self._cache_roots or program_cache.default_roots()
        try:
            copy = program_cache.cached_install(
                install, roots, lambda folder: _closed_folder(folder, account, groups)
            )
        except (OSError, program_cache.CacheError) as error:
            raise ServerError(
                f"as root, Postgres runs as the user {SERVICE_USER!r}, which cannot reach its "
                f"programs in {install / 'bin'} ({blocked} is closed to it), and no copy it "
                f"can reach could be made: {error}",
                remedy=f"make {roots[0]} a folder root can create, owned by root and "
                "writable by no one else",
            ) from error
        return copy / "bin"

    def _prepare_folder(self, account: _Account | None) -> None:
        if not self.pgdata.exists():
            self.pgdata.mkdir(mode=0o700)
        if account is not None and self.pgdata.stat().st_uid != account.uid:
            if any(self.pgdata.iterdir()):
                raise ServerError(
                    f"{self.pgdata} belongs to uid {self.pgdata.stat().st_uid}, not to the "
                    f"user {SERVICE_USER!r} who runs Postgres as root",
                    remedy=f"remove {self.pgdata}, or set CTXGRAPH_HOME to another folder",
                )
            os.chown(self.pgdata, account.uid, account.gid)
        self.pgdata.chmod(0o700)

    def _run(
        self, args: list[str], account: _Account | None, timeout: float, remedy: str = ""
    ) -> None:
        """Run a Postgres program in the data folder (as ``account``); raise with its output."""
        with tempfile.TemporaryFile("w+") as output:
            try:
                subprocess.run(
                    args,
                    cwd=self.pgdata,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                    check=True,
                    user=None if account is None else account.uid,
                    group=None if account is None else account.gid,
                    extra_groups=None if account is None else [],
                )
            except OSError as error:
                raise ServerError(f"cannot run {args[0]}: {error}") from error
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
                output.seek(0)
                lines = [line for line in output.read().splitlines() if line.strip()]
                detail = lines[-1] if lines else str(error)
                raise ServerError(
                    f"{Path(args[0]).name} failed: {detail}", remedy=remedy
                ) from error

    def _data_arg(self, account: _Account | None) -> str:
        return str(self.pgdata) if account is None else _HERE

    def _initdb(self, account: _Account | None, bin_dir: Path) -> None:
        self._run(
            [
                str(bin_dir / "initdb"),
                "-D",
                self._data_arg(account),
                "--auth=trust",
                "--auth-local=trust",
                "--encoding=utf8",
                "-U",
                "postgres",
            ],
            account,
            timeout=120,
        )

    def _socket_dir(self, account: _Account | None) -> tuple[Path, str]:
        """Where the socket lives (as clients see it, as the server is told)."""
        if len(str(self.pgdata / _SOCKET_NAME).encode()) <= _SOCKET_PATH_MAX:
            return self.pgdata, self._data_arg(account)
        digest = hashlib.sha256(str(self.pgdata).encode()).hexdigest()[:12]
        folder = Path(tempfile.gettempdir()) / f"ctxgraph-{os.geteuid()}-{digest}"
        folder.mkdir(mode=0o700, exist_ok=True)
        if account is not None:
            os.chown(folder, account.uid, account.gid)
        return folder, str(folder)

    def _postmaster_lines(self) -> list[str] | None:
        try:
            lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return lines if len(lines) >= 8 and lines[0].strip().isdigit() else None

    def _running_uri(self) -> str | None:
        """The URI of the server if it runs and is ready; clears a stale ``postmaster.pid``."""
        lines = self._postmaster_lines()
        if lines is None or not process_alive(int(lines[0])):
            with contextlib.suppress(FileNotFoundError):
                (self.pgdata / "postmaster.pid").unlink()
            return None
        if lines[7].strip() != "ready":
            return None
        socket_dir = lines[4].strip()
        host = str(self.pgdata) if socket_dir in ("", _HERE) else socket_dir
        port = lines[3].strip() or "5432"
        return f"postgresql://postgres@/postgres?host={quote(host, safe='/')}&port={port}"

    def _start(self, account: _Account | None, bin_dir: Path) -> str:
        folder, told = self._socket_dir(account)
        with contextlib.suppress(FileNotFoundError):
            (folder / f"{_SOCKET_NAME}.lock").unlink()
        options = f"-h '' -k '{told}'"
        deadline = time.monotonic() + START_WAIT
        while True:
            try:
                self._run(
                    [
                        str(bin_dir / "pg_ctl"),
                        "-D",
                        self._data_arg(account),
                        "-w",
                        "-t",
                        str(int(START_WAIT)),
                        "-l",
                        "log",
                        "-o",
                        options,
                        "start",
                    ],
                    account,
                    timeout=START_WAIT + 5,
                    remedy=f"see the server log {self.pgdata / 'log'}",
                )
            except ServerError:
                # Backends of a killed server may hold its shared memory for a moment.
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
                continue
            uri = self._running_uri()
            if uri is not None:
                return uri
            if time.monotonic() > deadline:
                raise ServerError(
                    f"the server in {self.pgdata} did not become ready in {START_WAIT:g} s",
                    remedy=f"see the server log {self.pgdata / 'log'}",
                )
            time.sleep(0.2)

    def _live_clients(self) -> list[tuple[int, int]]:
        try:
            raw = json.loads(self.clients_path.read_text())
        except (FileNotFoundError, ValueError):
            return []
        clients: list[tuple[int, int]] = []
        for item in raw if isinstance(raw, list) else []:
            if isinstance(item, list) and len(item) == 2:
                pid, started = int(item[0]), int(item[1])
                if process_alive(pid, started):
                    clients.append((pid, started))
        return clients

    def _write_clients(self, clients: list[tuple[int, int]]) -> None:
        unique = sorted(set(clients))
        temporary = self.clients_path.with_suffix(".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump([list(c) for c in unique], handle)
        temporary.replace(self.clients_path)
