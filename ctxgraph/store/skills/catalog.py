"""Every skill of the configured folders and the Store, re-read cheaply on each refresh."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import stat
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ctxgraph.store.skills.files import SKILL_FILE, store_files, walk_skill_folder
from ctxgraph.store.skills.format import SkillFormatError, parse_skill_md
from ctxgraph.store.skills.model import (
    EMPTY_SNAPSHOT,
    STORE_NAMESPACE,
    STORE_REF_PREFIX,
    Skill,
    SkillProblem,
    SkillSnapshot,
    SkillSource,
)

if TYPE_CHECKING:
    # Annotations only: the folder-only commands (``ctxgraph skills``) skip the Store layer.
    from langgraph.store.base import BaseStore, SearchItem

__all__ = ["MAX_SKILL_MD_BYTES", "STORE_PAGE", "SkillCatalog", "unknown_tools"]

logger = logging.getLogger("ctxgraph.skills")

STORE_PAGE = 100
"""Items fetched per Store search."""

MAX_SKILL_MD_BYTES = 1_000_000
"""A larger ``SKILL.md`` is skipped with a problem."""

_MAX_LOGGED = 1_000
"""Distinct problems remembered as logged; past this the memory starts over."""

StatKey = tuple[str, int, int, int]
"""``(path, st_mtime_ns, st_size, st_ino)`` of a ``SKILL.md``."""


@dataclass(frozen=True)
class _Parsed:
    """The outcome of parsing one ``SKILL.md``: a skill and its warnings, or a problem."""

    skill: Skill | None
    problems: tuple[SkillProblem, ...]


@dataclass(frozen=True)
class _DiskEntry:
    """A cached disk skill: the stat keys it was read at, and what came out."""

    key: StatKey
    folder_key: tuple[int, int]
    """``(st_mtime_ns, st_ino)`` of the skill folder when its files were listed."""
    parsed: _Parsed


@dataclass(frozen=True)
class _StoreRead:
    """The items of the Store namespace, or why they could not be read."""

    items: tuple[SearchItem, ...] = ()
    error: str | None = None


class SkillCatalog:
    """The skills of ``dirs`` (folders of skill folders) and, with ``use_store``, the Store.

    ``refresh``/``arefresh`` re-read the sources, re-parsing only ``SKILL.md`` files whose
    stat changed, and return the previous snapshot object when nothing changed.
    """

    def __init__(
        self,
        dirs: Sequence[str | os.PathLike[str]] = (),
        *,
        use_store: bool = False,
        disabled: Collection[str] = (),
    ) -> None:
        self.dirs: tuple[Path, ...] = tuple(Path(os.path.abspath(d)) for d in dirs)
        self.use_store = use_store
        self.disabled = frozenset(disabled)
        self._latest = EMPTY_SNAPSHOT
        self._disk: dict[str, _DiskEntry] = {}
        self._store: dict[str, tuple[tuple[str, tuple[str, ...]], _Parsed]] = {}
        self._logged: set[SkillProblem] = set()
        self._lock = threading.Lock()

    @property
    def latest(self) -> SkillSnapshot:
        """The most recent snapshot (``EMPTY_SNAPSHOT`` before the first refresh)."""
        return self._latest

    def refresh(self, store: BaseStore | None = None) -> SkillSnapshot:
        """A snapshot of every source as it is now."""
        if not self.dirs and not self.use_store:
            return EMPTY_SNAPSHOT
        read = _StoreRead()
        if self.use_store and store is not None:
            read = _read_store(
                lambda offset: store.search(STORE_NAMESPACE, limit=STORE_PAGE, offset=offset)
            )
        return self._build(read)

    async def arefresh(self, store: BaseStore | None = None) -> SkillSnapshot:
        """Async :meth:`refresh`: the Store is read asynchronously, the folders in a thread."""
        if not self.dirs and not self.use_store:
            return EMPTY_SNAPSHOT
        read = _StoreRead()
        if self.use_store and store is not None:
            items: list[SearchItem] = []
            try:
                while True:
                    found = await store.asearch(
                        STORE_NAMESPACE, limit=STORE_PAGE, offset=len(items)
                    )
                    items.extend(found)
                    if len(found) < STORE_PAGE:
                        break
            except Exception as error:
                read = _StoreRead(error=_error_text(error))
            else:
                read = _StoreRead(items=tuple(items))
        if not self.dirs:
            return self._build(read)
        # Reading the folders blocks; an event loop (a LangGraph server's) must not wait on it.
        return await asyncio.to_thread(self._build, read)

    def _build(self, read: _StoreRead) -> SkillSnapshot:
        with self._lock:
            readable = True
            found: list[Skill] = []
            problems: list[SkillProblem] = []
            seen: set[str] = set()
            for folder in self.dirs:
                ok = self._scan_dir(folder, found, problems, seen)
                readable = readable and ok
            self._disk = {path: self._disk[path] for path in seen if path in self._disk}
            if read.error is not None:
                readable = False
                problems.append(SkillProblem(STORE_REF_PREFIX, None, read.error))
            else:
                self._scan_store(read.items, found, problems)
            skills = self._resolve(found, problems)
            snapshot = SkillSnapshot.of(skills, problems, readable=readable)
            latest = self._latest
            if (
                snapshot.digest == latest.digest
                and snapshot.skills == latest.skills
                and snapshot.problems == latest.problems
            ):
                return latest
            self._log(snapshot.problems)
            self._latest = snapshot
            return snapshot

    def _scan_dir(
        self, folder: Path, found: list[Skill], problems: list[SkillProblem], seen: set[str]
    ) -> bool:
        """Adds the skills of one configured folder; False when it cannot be read."""
        candidates = _candidates(folder, problems)
        if candidates is None:
            return False
        for candidate in candidates:
            parsed = self._disk_skill(candidate, seen)
            if parsed is not None:
                _collect(parsed, found, problems)
        return True

    def _disk_skill(self, folder: Path, seen: set[str]) -> _Parsed | None:
        """The parse of ``folder``'s ``SKILL.md`` (cached by stat); None without one."""
        path = str(folder / SKILL_FILE)
        try:
            found = os.stat(path)
            folder_stat = os.stat(folder)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as error:
            return _Parsed(None, (SkillProblem(path, None, _error_text(error)),))
        seen.add(path)
        key: StatKey = (path, found.st_mtime_ns, found.st_size, found.st_ino)
        folder_key = (folder_stat.st_mtime_ns, folder_stat.st_ino)
        cached = self._disk.get(path)
        if cached is not None and cached.key == key:
            if cached.folder_key == folder_key or cached.parsed.skill is None:
                return cached.parsed
            skill = dataclasses.replace(cached.parsed.skill, files=walk_skill_folder(folder))
            parsed = _Parsed(skill, cached.parsed.problems)
        else:
            key, parsed = _read_disk_skill(folder, path, found)
        self._disk[path] = _DiskEntry(key, folder_key, parsed)
        return parsed

    def _scan_store(
        self, items: Sequence[SearchItem], found: list[Skill], problems: list[SkillProblem]
    ) -> None:
        """Adds the skills of the Store items (parses cached by key and content hash)."""
        cache: dict[str, tuple[tuple[str, tuple[str, ...]], _Parsed]] = {}
        for item in sorted(items, key=lambda item: item.key):
            if tuple(item.namespace) != STORE_NAMESPACE:
                continue
            ref = f"{STORE_REF_PREFIX}{item.key}/{SKILL_FILE}"
            content = _store_content(item.value)
            if content is None:
                problems.append(SkillProblem(ref, None, _STORE_SHAPE))
                continue
            listed = store_files(item.value)
            digest = (hashlib.sha256(content.encode("utf-8", "replace")).hexdigest(), listed)
            cached = self._store.get(item.key)
            if cached is not None and cached[0] == digest:
                parsed = cached[1]
            else:
                parsed = _with_files(_parse(content, ref, item.key, "store"), listed)
            cache[item.key] = (digest, parsed)
            _collect(parsed, found, problems)
        self._store = cache

    def _resolve(self, found: list[Skill], problems: list[SkillProblem]) -> list[Skill]:
        """The enabled skills, the first of each name kept (duplicates become problems)."""
        kept: dict[str, Skill] = {}
        for skill in found:
            if skill.name in self.disabled:
                continue
            first = kept.get(skill.name)
            if first is None:
                kept[skill.name] = skill
                continue
            problems.append(
                SkillProblem(
                    skill.path,
                    "name",
                    f"duplicate skill {skill.name!r}, skipped: {first.path} has the same name",
                )
            )
        return list(kept.values())

    def _log(self, problems: Sequence[SkillProblem]) -> None:
        """Logs each problem not logged before by this catalog."""
        for problem in problems:
            if problem in self._logged:
                continue
            if len(self._logged) >= _MAX_LOGGED:
                self._logged.clear()
            self._logged.add(problem)
            logger.warning("skill problem: %s", problem)


def unknown_tools(snapshot: SkillSnapshot, tool_names: Collection[str]) -> tuple[SkillProblem, ...]:
    """One problem per ``allowed-tools`` name of a skill that is not one of ``tool_names``."""
    known = ", ".join(sorted(tool_names)) or "none"
    return tuple(
        SkillProblem(
            skill.path,
            "allowed-tools",
            f"unknown tool {name!r} (the graph's tools are: {known})",
        )
        for skill in snapshot.skills
        for name in skill.allowed_tools or ()
        if name not in tool_names
    )


def _read_store(search: Callable[[int], list[SearchItem]]) -> _StoreRead:
    """Every item ``search`` pages through, or the error that stopped it."""
    items: list[SearchItem] = []
    try:
        while True:
            found = search(len(items))
            items.extend(found)
            if len(found) < STORE_PAGE:
                return _StoreRead(items=tuple(items))
    except Exception as error:
        return _StoreRead(error=_error_text(error))


def _read_disk_skill(folder: Path, path: str, found: os.stat_result) -> tuple[StatKey, _Parsed]:
    """The stat key and parse of the ``SKILL.md`` at ``path`` (stat taken before reading)."""
    key: StatKey = (path, found.st_mtime_ns, found.st_size, found.st_ino)
    if not stat.S_ISREG(found.st_mode):
        return key, _Parsed(None, (SkillProblem(path, None, "not a regular file"),))
    try:
        with open(path, "rb") as handle:
            opened = os.fstat(handle.fileno())
            key = (path, opened.st_mtime_ns, opened.st_size, opened.st_ino)
            links = max(found.st_nlink, opened.st_nlink)
            data = b"" if links > 1 else handle.read(MAX_SKILL_MD_BYTES + 1)
    except OSError as error:
        return key, _Parsed(None, (SkillProblem(path, None, _error_text(error)),))
    if links > 1:
        message = (
            f"a hard link ({links} links), which may lead out of the skill folder; "
            "copy the file into the folder instead"
        )
        return key, _Parsed(None, (SkillProblem(path, None, message),))
    if len(data) > MAX_SKILL_MD_BYTES:
        message = f"larger than the limit of {MAX_SKILL_MD_BYTES:,} bytes"
        return key, _Parsed(None, (SkillProblem(path, None, message),))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return key, _Parsed(None, (SkillProblem(path, None, f"not UTF-8 text: {error}"),))
    parsed = _parse(text, path, folder.name, "dir")
    return key, _with_files(parsed, walk_skill_folder(folder) if parsed.skill else ())


def _parse(text: str, ref: str, folder_name: str, source: SkillSource) -> _Parsed:
    """``parse_skill_md`` as a ``_Parsed``."""
    try:
        skill, warnings = parse_skill_md(text, file=ref, folder_name=folder_name, source=source)
    except SkillFormatError as error:
        return _Parsed(None, (error.problem,))
    return _Parsed(skill, warnings)


def _with_files(parsed: _Parsed, files: tuple[str, ...]) -> _Parsed:
    """``parsed`` with its skill's supporting files set."""
    if parsed.skill is None:
        return parsed
    return _Parsed(dataclasses.replace(parsed.skill, files=files), parsed.problems)


def _error_text(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


_STORE_SHAPE = (
    "the Store item must be {'content': '<SKILL.md text>', 'files': {'<relative path>': '<text>'}}"
)


def _store_content(value: object) -> str | None:
    """The ``SKILL.md`` text of a well-shaped Store item, or None."""
    if not isinstance(value, Mapping):
        return None
    content, files = value.get("content"), value.get("files")
    if not isinstance(content, str) or not (files is None or isinstance(files, Mapping)):
        return None
    return content


def _candidates(folder: Path, problems: list[SkillProblem]) -> list[Path] | None:
    """The skill folders of a configured folder (itself, or its entries); None: unreadable."""
    try:
        if not folder.is_dir():
            message = "folder not found" if not folder.exists() else "not a folder"
            problems.append(SkillProblem(str(folder), None, message))
            return None
        if (folder / SKILL_FILE).exists():
            return [folder]
        with os.scandir(folder) as listing:
            names = sorted(entry.name for entry in listing)
        return [folder / name for name in names if not name.startswith(".")]
    except OSError as error:
        problems.append(SkillProblem(str(folder), None, _error_text(error)))
        return None


def _collect(parsed: _Parsed, found: list[Skill], problems: list[SkillProblem]) -> None:
    """Add a parse's problems, and its skill if it has one."""
    problems.extend(parsed.problems)
    if parsed.skill is not None:
        found.append(parsed.skill)
