"""A root-owned, world-readable copy of the Postgres programs for a user who cannot reach them.

As root, Postgres runs as a service user. When the programs shipped with the ``pgserver``
package sit below a folder closed to that user (a virtual environment in ``/root``, mode
700), ctxgraph copies what Postgres needs (``bin``, ``lib``, ``share`` and the package's
``.libs`` folder of bundled libraries) to a cache outside any home, instead of changing
the mode of a folder it does not own::

    /var/cache/ctxgraph/postgres/<version>-<digest>/pgserver/pginstall/{bin,lib,share}
    /var/cache/ctxgraph/postgres/<version>-<digest>/pgserver.libs/

The copy keeps the installed layout, so the programs find their libraries (``$ORIGIN``
run paths) and ``share`` relative to their own location. ``<digest>`` is a SHA-256 of the
source tree (paths, executable bits, contents, link targets). A copy is built in a
temporary sibling folder under a lock file (``.lock``), verified, and renamed into place,
so processes racing to create it are safe and none sees a partial copy. Before every use
(only when a server is started, never when one is joined) the copy is checked again:
every folder and file must belong to root and be writable by no one else, and its content
must hash to the source's digest; a copy that fails is deleted and built again. When
``/var/cache`` cannot be used, the copy goes to the temp folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

PARTS = ("bin", "lib", "share")
"""The folders of the Postgres installation that the server and ``initdb`` read."""

_BLOCK = 1 << 20


class CacheError(RuntimeError):
    """No usable copy of the Postgres programs could be found or made."""


def default_roots() -> tuple[Path, ...]:
    """Where copies go, in order: ``/var/cache/ctxgraph/postgres``, then the temp folder."""
    return (
        Path("/var/cache/ctxgraph/postgres"),
        Path(tempfile.gettempdir()) / "ctxgraph-postgres",
    )


def _libs_folder(install: Path) -> Path:
    """The bundled-libraries folder of a wheel repaired by auditwheel (``pgserver.libs``)."""
    package = install.parent
    return package.parent / f"{package.name}.libs"


def _layout(install: Path) -> list[tuple[Path, Path]]:
    """Pairs of (source folder, its path relative to a copy's top folder)."""
    package = install.parent.name
    pairs = [(install / part, Path(package, install.name, part)) for part in PARTS]
    libs = _libs_folder(install)
    if libs.is_dir():
        pairs.append((libs, Path(libs.name)))
    return pairs


def _entries(folder: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every path below ``folder`` (itself first) with its ``lstat``, in a stable order."""
    yield folder, folder.lstat()
    for top, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(dirs + files):
            path = Path(top, name)
            yield path, path.lstat()


def _file_digest(path: Path) -> bytes:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.digest()


def tree_digest(pairs: Sequence[tuple[Path, Path]], *, owned_by_root: bool = False) -> str:
    """SHA-256 of the folders in ``pairs`` (as their relative names), hex.

    Args:
        pairs: (folder, the name it is hashed under) pairs.
        owned_by_root: also require every entry to belong to root and be writable by no
            other user (the check of a copy).

    Returns:
        The hex digest.

    Raises:
        CacheError: an entry is not a folder, file or symbolic link, or (with
            ``owned_by_root``) belongs to another user or is writable by one.

    """
    total = hashlib.sha256()
    for folder, name in pairs:
        for path, info in _entries(folder):
            link = stat.S_ISLNK(info.st_mode)
            if owned_by_root and (info.st_uid != 0 or (info.st_mode & 0o022 and not link)):
                raise CacheError(f"{path} is not root-owned and closed to writes by others")
            relative = (name / path.relative_to(folder)).as_posix().encode()
            if link:
                total.update(b"L" + relative + b"\0" + os.readlink(path).encode() + b"\0")
            elif stat.S_ISDIR(info.st_mode):
                total.update(b"D" + relative + b"\0")
            elif stat.S_ISREG(info.st_mode):
                kind = b"X" if info.st_mode & 0o111 else b"F"
                total.update(kind + relative + b"\0" + _file_digest(path))
            else:
                raise CacheError(f"{path} is not a folder, file or symbolic link")
    return total.hexdigest()


def postgres_version(install: Path) -> str:
    """The version of the Postgres in ``install`` (``16.2``), from ``postgres --version``."""
    program = install / "bin" / "postgres"
    try:
        done = subprocess.run(
            [str(program), "--version"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise CacheError(f"cannot run {program} --version: {error}") from error
    words = done.stdout.split()
    if not words or not words[-1][:1].isdigit():
        raise CacheError(f"{program} --version printed {done.stdout.strip()!r}, not a version")
    return words[-1]


def _safe_folder(path: Path) -> str | None:
    """Why ``path`` is unsafe to keep root's programs in (None: a root-owned, closed folder)."""
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a folder"
    if info.st_uid != 0:
        return f"{path} belongs to uid {info.st_uid}, not root"
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        return f"{path} is writable by users other than root"
    return None


def _prepare_root(root: Path, closed: Callable[[Path], Path | None]) -> Path:
    """Create ``root`` (mode 755) unless it exists; fail unless it is safe and reachable."""
    root = root.resolve()
    missing = [p for p in [root, *root.parents] if not p.exists()]
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o755)
        except FileExistsError:
            continue
        folder.chmod(0o755)
    for folder in [root, *root.parents]:
        problem = _safe_folder(folder)
        if problem is not None:
            raise CacheError(problem)
    blocked = closed(root)
    if blocked is not None:
        raise CacheError(f"{blocked} is closed to the user who runs Postgres")
    return root


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold the lock that serialises building and discarding copies in ``root``."""
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _copy(pairs: Sequence[tuple[Path, Path]], top: Path) -> None:
    """Copy the ``pairs`` below ``top``; folders 755, files 755 or 644, owned by root."""
    for source, name in pairs:
        target = top / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, target, symlinks=True)
    for path, info in _entries(top):
        if stat.S_ISLNK(info.st_mode):
            continue
        executable = stat.S_ISDIR(info.st_mode) or info.st_mode & 0o111
        path.chmod(0o755 if executable else 0o644)


def _check(top: Path, pairs: Sequence[tuple[Path, Path]], digest: str) -> str | None:
    """Why the copy in ``top`` is unusable, or None when it is safe and matches ``digest``."""
    try:
        for _, name in pairs:
            for folder in [top / name, *(top / name).parents]:
                problem = _safe_folder(folder)
                if problem is not None:
                    return problem
                if folder == top:
                    break
        found = tree_digest([(top / name, name) for _, name in pairs], owned_by_root=True)
    except (OSError, CacheError) as error:
        return str(error)
    return None if found == digest else f"the content of {top} does not match its digest"


def cached_install(
    install: Path,
    roots: Sequence[Path],
    closed: Callable[[Path], Path | None],
) -> Path:
    """A verified copy of ``install`` that the service user can reach; built if needed.

    Args:
        install: the ``pginstall`` folder of the ``pgserver`` package (or a copy of it).
        roots: cache folders to try in order (see ``default_roots``).
        closed: the first folder of a path that the service user cannot traverse, or None.

    Returns:
        The ``pginstall`` folder inside the copy.

    Raises:
        CacheError: no root could hold a verified copy; the message says why for each.

    """
    pairs = _layout(install)
    digest = tree_digest(pairs)
    key = f"{postgres_version(install)}-{digest[:16]}"
    problems: list[str] = []
    for root in roots:
        try:
            top = _build(_prepare_root(root, closed), key, pairs, digest)
        except (OSError, CacheError) as error:
            problems.append(f"{root}: {error}")
            continue
        return top / pairs[0][1].parent
    raise CacheError("; ".join(problems))


def _build(root: Path, key: str, pairs: Sequence[tuple[Path, Path]], digest: str) -> Path:
    """The verified copy ``root / key``: reused, or (re)built and renamed into place."""
    final = root / key
    if final.exists() and _check(final, pairs, digest) is None:
        return final
    with _locked(root):
        if final.exists() and _check(final, pairs, digest) is None:
            return final  # built by another process while this one waited
        for leftover in [final, *root.glob(".*")]:
            if leftover.name != ".lock" and (leftover.exists() or leftover.is_symlink()):
                _remove(leftover)  # a bad copy, or a build of a process that died
        building = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
        try:
            _copy(pairs, building)
            problem = _check(building, pairs, digest)
            if problem is not None:
                raise CacheError(f"the copy changed while it was made: {problem}")
            building.rename(final)
        finally:
            _remove(building)
    return final
