"""Safe listing and reading of a skill's supporting files, in its folder or its Store item."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

from ctxgraph.store.skills.model import STORE_NAMESPACE, Skill

if TYPE_CHECKING:
    # Annotations only: the folder-only commands (``ctxgraph skills``) skip the Store layer.
    from langgraph.store.base import BaseStore, Item

__all__ = [
    "MAX_LISTED_FILES",
    "SKILL_FILE",
    "SkillFileError",
    "alist_skill_files",
    "aread_skill_text",
    "list_skill_files",
    "read_skill_text",
    "store_files",
    "walk_skill_folder",
]

SKILL_FILE = "SKILL.md"
MAX_LISTED_FILES = 200
"""Supporting files listed per skill; the walk stops there."""

MAX_SCANNED_ENTRIES = 10_000
"""Folder entries a walk looks at before it gives up listing more."""

MAX_FILE_BYTES = 2_000_000
BINARY_PROBE_BYTES = 8192
"""A NUL byte in this many leading bytes marks a file as binary."""

_SHOWN_WHEN_MISSING = 20


class SkillFileError(ValueError):
    """A skill file that cannot be read; the message says why and what to do instead."""


def walk_skill_folder(folder: str | os.PathLike[str]) -> tuple[str, ...]:
    """The supporting files of the skill in ``folder``, as sorted POSIX relative paths.

    Regular files, recursively; hidden entries, the root ``SKILL.md``, symlinked folders,
    symlinks leading out of the folder and hard-linked files (more than one link: the
    other name may live anywhere) are left out; at most ``MAX_LISTED_FILES``.
    """
    root = Path(folder)
    try:
        real_root = os.path.realpath(root)
    except OSError:
        return ()
    found: list[str] = []
    scanned = 0
    pending: list[tuple[Path, PurePosixPath]] = [(root, PurePosixPath())]
    while pending and len(found) < MAX_LISTED_FILES and scanned < MAX_SCANNED_ENTRIES:
        here, relative = pending.pop()
        subfolders, seen = _scan_folder(here, relative, real_root, found)
        scanned += seen
        pending.extend(reversed(subfolders))
    return tuple(sorted(found))


def _scan_folder(
    here: Path, relative: PurePosixPath, real_root: str, found: list[str]
) -> tuple[list[tuple[Path, PurePosixPath]], int]:
    """Add the listable files of one folder to ``found``; return its subfolders and entry count.

    An unreadable folder counts as empty; the scan stops once ``found`` is full.
    """
    try:
        with os.scandir(here) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError:
        return [], 0
    subfolders: list[tuple[Path, PurePosixPath]] = []
    scanned = 0
    for entry in entries:
        scanned += 1
        if entry.name.startswith(".") or (not relative.parts and entry.name == SKILL_FILE):
            continue
        path = relative / entry.name
        kind = _entry_kind(entry, real_root)
        if kind == "folder":
            subfolders.append((Path(entry.path), path))
        elif kind == "file":
            found.append(path.as_posix())
            if len(found) >= MAX_LISTED_FILES:
                break
    return subfolders, scanned


def _entry_kind(entry: os.DirEntry[str], real_root: str) -> Literal["file", "folder"] | None:
    """Whether a folder entry is a listable file, a folder to walk, or neither (None).

    A symlink counts only as a file inside the folder; a hard-linked file (more than one
    link) or an entry that cannot be inspected counts as neither.
    """
    try:
        if entry.is_symlink():
            inside = (
                _inside(os.path.realpath(entry.path), real_root)
                and entry.is_file()
                and entry.stat().st_nlink <= 1
            )
            return "file" if inside else None
        if entry.is_dir(follow_symlinks=False):
            return "folder"
        if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_nlink <= 1:
            return "file"
    except OSError:
        return None
    return None


def store_files(value: object) -> tuple[str, ...]:
    """The supporting files of a Store item's value: its safe ``files`` keys, sorted."""
    files = value.get("files") if isinstance(value, Mapping) else None
    if not isinstance(files, Mapping):
        return ()
    names: list[str] = []
    for key in files:
        if isinstance(key, str) and key != SKILL_FILE:
            try:
                names.append(_relative(key))
            except SkillFileError:
                continue
    return tuple(sorted(set(names)))[:MAX_LISTED_FILES]


def list_skill_files(skill: Skill, store: BaseStore | None = None) -> tuple[str, ...]:
    """The skill's supporting files as they are now (its folder walked, its item re-read)."""
    if skill.source == "dir":
        return walk_skill_folder(Path(skill.path).parent)
    return store_files(_value(skill, _need(skill, store).get(STORE_NAMESPACE, skill.name)))


async def alist_skill_files(skill: Skill, store: BaseStore | None = None) -> tuple[str, ...]:
    """Async :func:`list_skill_files`."""
    if skill.source == "dir":
        return await asyncio.to_thread(walk_skill_folder, Path(skill.path).parent)
    item = await _need(skill, store).aget(STORE_NAMESPACE, skill.name)
    return store_files(_value(skill, item))


def read_skill_text(
    skill: Skill,
    path: str,
    store: BaseStore | None = None,
    *,
    max_bytes: int = MAX_FILE_BYTES,
) -> str:
    """The text of the skill's file ``path`` (relative POSIX; ``SKILL.md`` is the whole file).

    Raises ``SkillFileError`` for a path leaving the folder, a missing, binary or oversized
    file; bytes that are not UTF-8 are replaced.
    """
    relative = _relative(path)
    if skill.source == "dir":
        return _read_from_folder(skill, relative, max_bytes)
    item = _need(skill, store).get(STORE_NAMESPACE, skill.name)
    return _read_from_value(skill, relative, _value(skill, item), max_bytes)


async def aread_skill_text(
    skill: Skill,
    path: str,
    store: BaseStore | None = None,
    *,
    max_bytes: int = MAX_FILE_BYTES,
) -> str:
    """Async :func:`read_skill_text`."""
    relative = _relative(path)
    if skill.source == "dir":
        return await asyncio.to_thread(_read_from_folder, skill, relative, max_bytes)
    item = await _need(skill, store).aget(STORE_NAMESPACE, skill.name)
    return _read_from_value(skill, relative, _value(skill, item), max_bytes)


def _relative(path: str) -> str:
    """``path`` as a clean relative POSIX path, or ``SkillFileError``."""
    _check_spelling(path)
    parts = [part for part in PurePosixPath(path).parts if part != "."]
    _check_parts(path, parts)
    return "/".join(parts)


def _check_spelling(path: str) -> None:
    """Raise ``SkillFileError`` for an empty, backslashed, NUL-carrying or absolute ``path``."""
    if not isinstance(path, str) or not path.strip():
        raise SkillFileError("give a file path relative to the skill folder, e.g. 'SKILL.md'")
    if "\\" in path or "\x00" in path:
        raise SkillFileError(f"{path!r}: use '/' as separator and no backslashes or NUL bytes")
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("~") or (len(path) > 1 and path[1] == ":"):
        raise SkillFileError(f"{path!r} is absolute; give a path relative to the skill folder")


def _check_parts(path: str, parts: list[str]) -> None:
    """Raise ``SkillFileError`` when ``path``'s parts leave, name or hide within the folder."""
    if ".." in parts:
        raise SkillFileError(f"{path!r} leaves the skill folder ('..' is not allowed)")
    if not parts:
        raise SkillFileError(f"{path!r} is the skill folder itself; give a file in it")
    if any(part.startswith(".") for part in parts):
        raise SkillFileError(f"{path!r} is hidden; hidden files are not part of the skill")


def _inside(real: str, real_root: str) -> bool:
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def _need(skill: Skill, store: BaseStore | None) -> BaseStore:
    if store is None:
        raise SkillFileError(f"skill {skill.name!r} lives in the Store, and no Store was given")
    return store


def _value(skill: Skill, item: Item | None) -> Mapping[str, object]:
    if item is None:
        raise SkillFileError(f"skill {skill.name!r} is no longer in the Store")
    return item.value


def _missing(skill: Skill, path: str, available: tuple[str, ...]) -> SkillFileError:
    if not available:
        return SkillFileError(
            f"no file {path!r} in skill {skill.name!r}; it has no files besides {SKILL_FILE}"
        )
    shown = ", ".join(available[:_SHOWN_WHEN_MISSING])
    more = len(available) - _SHOWN_WHEN_MISSING
    tail = f" (and {more} more)" if more > 0 else ""
    return SkillFileError(
        f"no file {path!r} in skill {skill.name!r}; its files are: {SKILL_FILE}, {shown}{tail}"
    )


def _too_large(skill: Skill, path: str, size: int, max_bytes: int) -> SkillFileError:
    return SkillFileError(
        f"{path!r} of skill {skill.name!r} is {size:,} bytes, over the limit of {max_bytes:,} bytes"
    )


def _checked_text(skill: Skill, path: str, data: bytes, max_bytes: int) -> str:
    if len(data) > max_bytes:
        raise _too_large(skill, path, len(data), max_bytes)
    if b"\x00" in data[:BINARY_PROBE_BYTES]:
        raise SkillFileError(f"{path!r} of skill {skill.name!r} is a binary file, not text")
    return data.decode("utf-8", errors="replace")


def _read_from_folder(skill: Skill, path: str, max_bytes: int) -> str:
    folder = Path(skill.path).parent
    real_root = os.path.realpath(folder)
    real = os.path.realpath(folder / path)
    if not _inside(real, real_root):
        raise SkillFileError(f"{path!r} leads out of the folder of skill {skill.name!r}")
    try:
        found = os.stat(real)
    except FileNotFoundError:
        raise _missing(skill, path, walk_skill_folder(folder)) from None
    except OSError as error:
        raise SkillFileError(f"{path!r} of skill {skill.name!r}: {error.strerror}") from None
    if stat.S_ISDIR(found.st_mode):
        inside = [name for name in walk_skill_folder(folder) if name.startswith(f"{path}/")]
        listed = ", ".join(inside[:_SHOWN_WHEN_MISSING]) or "none"
        raise SkillFileError(f"{path!r} is a folder; its files are: {listed}")
    if not stat.S_ISREG(found.st_mode):
        raise SkillFileError(f"{path!r} of skill {skill.name!r} is not a regular file")
    _refuse_hard_link(skill, path, found)
    if found.st_size > max_bytes:
        raise _too_large(skill, path, found.st_size, max_bytes)
    try:
        descriptor = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(descriptor, "rb") as handle:
            # The file opened may not be the one stat-ed (a link swapped in between).
            opened = os.fstat(handle.fileno())
            if not stat.S_ISREG(opened.st_mode):
                raise SkillFileError(f"{path!r} of skill {skill.name!r} is not a regular file")
            _refuse_hard_link(skill, path, opened)
            data = handle.read(max_bytes + 1)
    except OSError as error:
        raise SkillFileError(f"{path!r} of skill {skill.name!r}: {error.strerror}") from None
    return _checked_text(skill, path, data, max_bytes)


def _refuse_hard_link(skill: Skill, path: str, found: os.stat_result) -> None:
    """Refuse a regular file with more than one link: its other names may be anywhere."""
    if found.st_nlink > 1:
        raise SkillFileError(
            f"{path!r} is a hard link ({found.st_nlink} links) and may lead out of the "
            f"folder of skill {skill.name!r}; copy the file into the folder instead"
        )


def _read_from_value(skill: Skill, path: str, value: Mapping[str, object], max_bytes: int) -> str:
    if path == SKILL_FILE:
        text = value.get("content")
    else:
        files = value.get("files")
        text = files.get(path) if isinstance(files, Mapping) else None
    if not isinstance(text, str):
        raise _missing(skill, path, store_files(value))
    data = text.encode("utf-8", errors="replace")
    return _checked_text(skill, path, data, max_bytes)
