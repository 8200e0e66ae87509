"""The record of a thread's active skills: entries, and the reducer that keeps it bounded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired, cast

from typing_extensions import TypedDict

DEFAULT_MAX_ACTIVE_SKILLS = 8
"""How many skills stay active when an update does not say (``Settings.max_active_skills``)."""

SkillActivation = Literal["load_skill", "slash"]
"""How a skill became active: the model loaded it, or the user named it with ``/name``."""


class SkillContextEntry(TypedDict):
    """One active skill, as ``state["skill_context"]`` keeps it."""

    name: str
    path: str
    """The skill's ref (the path of its ``SKILL.md``): entries are de-duplicated by it."""
    description: str
    sha256: str
    """Hex SHA-256 of the ``SKILL.md`` that was loaded."""
    loaded_at: str
    """ISO-8601 UTC time of the load."""
    source: SkillActivation
    allowed_tools: list[str] | None
    """The skill's ``allowed-tools`` when it was loaded; None when it declares none."""
    tool_call_id: NotRequired[str]
    """The ``load_skill`` call that loaded it, so the request knows whether its body is
    still in the window."""


class SkillContextUpdate(TypedDict):
    """An update that also says how many skills stay active."""

    entries: list[SkillContextEntry]
    max_active: int


def merge_skill_context(
    current: Sequence[Mapping[str, Any]] | None,
    update: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None,
) -> list[SkillContextEntry]:
    """Reducer of ``skill_context``: de-duplicate by path, most recent last, keep the newest.

    ``update`` is a list of new entries (at most ``DEFAULT_MAX_ACTIVE_SKILLS`` stay) or a
    ``SkillContextUpdate`` (``max_active`` of them stay). An entry whose path is already
    active replaces it and moves to the end. None leaves the record as it is.
    """
    merged: dict[str, SkillContextEntry] = {
        str(entry["path"]): _entry(entry) for entry in current or ()
    }
    if update is None:
        return list(merged.values())
    cap = DEFAULT_MAX_ACTIVE_SKILLS
    if isinstance(update, Mapping):
        entries: Sequence[Mapping[str, Any]] = update.get("entries") or ()
        cap = _max_active(update.get("max_active", DEFAULT_MAX_ACTIVE_SKILLS))
    else:
        entries = update
    for entry in entries:
        path = _path(entry)
        merged.pop(path, None)
        merged[path] = _entry(entry)
    kept = list(merged.values())
    return kept[-cap:]


def _path(entry: Mapping[str, Any]) -> str:
    path = entry.get("path") if isinstance(entry, Mapping) else None
    if not isinstance(path, str) or not path:
        raise ValueError(f"a skill_context entry needs a non-empty 'path', got {entry!r:.200}")
    return path


def _entry(entry: Mapping[str, Any]) -> SkillContextEntry:
    _path(entry)
    return cast(SkillContextEntry, dict(entry))


def _max_active(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"skill_context max_active must be a whole number >= 1, got {value!r}")
    return value
