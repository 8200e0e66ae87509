"""Helpers for tests that watch the embedded Postgres of a data folder from outside."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

from ctxgraph.store.persistence import program_cache
from ctxgraph.store.persistence.embedded_server import package_install
from tests.support.cli import start_python

HOLDER = (
    "import sys; from pathlib import Path; "
    "from ctxgraph.store.persistence.embedded import embedded_uri; "
    "print(embedded_uri(Path(sys.argv[1])), flush=True); sys.stdin.read()"
)
"""A client that joins the embedded server, prints its URI and waits for stdin to close."""


def start_holder(python: str, env: dict[str, str], home: Path) -> subprocess.Popen[str]:
    """Start a process that holds the embedded server of ``home``; wait until it has joined."""
    holder = start_python(python, env, "-c", HOLDER, str(home))
    assert holder.stdout is not None
    line = holder.stdout.readline()
    assert line.startswith("postgresql://"), holder.communicate(timeout=30)
    return holder


def postgres_pids(pgdata: Path) -> list[int]:
    """Live (non-zombie) Postgres processes working in ``pgdata``."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "cwd") != str(pgdata):
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        state = stat[stat.rindex(")") + 2]
        if name.startswith("postgres") and state not in "ZXx":
            found.append(int(entry.name))
    return found


def postmaster_pid(pgdata: Path) -> int:
    """The pid recorded in ``pgdata/postmaster.pid``."""
    return int((pgdata / "postmaster.pid").read_text().splitlines()[0])


def wait_until_gone(pgdata: Path, timeout: float = 15.0) -> list[int]:
    """Wait for every Postgres process of ``pgdata`` to exit; return those still there."""
    deadline = time.monotonic() + timeout
    while (left := postgres_pids(pgdata)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def copy_install(site: Path) -> Path:
    """Copy the ``pgserver`` programs (and bundled libraries) into ``site``; return pginstall.

    The copy keeps the package's layout (``site/pgserver/pginstall`` beside
    ``site/pgserver.libs``), as a virtual environment's ``site-packages`` has it.
    """
    source = package_install()
    target = site / source.parent.name / source.name
    for part in program_cache.PARTS:
        shutil.copytree(source / part, target / part, symlinks=True)
    libs = source.parent.parent / f"{source.parent.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, site / libs.name, symlinks=True)
    return target


def folder_modes(top: Path, *skip: Path) -> dict[Path, int]:
    """The mode of every folder from ``/`` down to and below ``top``, except below ``skip``."""
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in [top, *top.parents]}
    for folder, dirs, _ in os.walk(top):
        dirs[:] = [d for d in dirs if Path(folder, d) not in skip]
        for name in dirs:
            modes[Path(folder, name)] = stat.S_IMODE(Path(folder, name).stat().st_mode)
    return modes
