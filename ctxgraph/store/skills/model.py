"""What a parsed skill is, what went wrong reading one, and one reading of every source."""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

SkillSource = Literal["dir", "store"]
"""Where a skill came from: a folder on disk, or the Store namespace ``("skills",)``."""

STORE_NAMESPACE: tuple[str, ...] = ("skills",)
"""The Store namespace a LangGraph server's skills live in, one item per skill."""

STORE_REF_PREFIX = "store://skills/"
"""A Store skill's ref is ``store://skills/<name>/SKILL.md``."""


@dataclass(frozen=True)
class Skill:
    """One valid skill: its front matter, its body and where to read it again."""

    name: str
    """1-64 characters of lowercase letters, digits and hyphens; equals its folder's name."""
    description: str
    """What the skill is for and when to use it (at most 1,024 characters)."""
    allowed_tools: tuple[str, ...] | None
    """Tool names from ``allowed-tools``; None when the field is absent (no restriction)."""
    body: str
    """The Markdown body of ``SKILL.md`` without its front matter."""
    path: str
    """The ref shown to the model: the absolute path of ``SKILL.md``, or a Store ref."""
    sha256: str
    """Hex SHA-256 of the whole ``SKILL.md`` (front matter included)."""
    source: SkillSource
    files: tuple[str, ...] = ()
    """Supporting files, as sorted POSIX paths relative to the skill folder."""


@dataclass(frozen=True)
class SkillProblem:
    """Why a skill (or a folder of skills) was skipped, or what in it is suspect."""

    file: str
    """The ``SKILL.md`` (or folder, or Store ref) the problem is in."""
    field: str | None
    """The front-matter field at fault (``name``, ``description``, ``allowed-tools``), if any."""
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class SkillSnapshot:
    """Every valid skill of one reading of the sources, with the problems found.

    ``digest`` changes whenever a skill is added, edited or removed, so two snapshots
    with equal digests render byte-identical listings.
    """

    skills: tuple[Skill, ...] = ()
    """Valid, enabled skills sorted by name; a name appears once."""
    problems: tuple[SkillProblem, ...] = ()
    readable: bool = True
    """False when a configured source could not be read at all (tool policy fails closed)."""
    digest: str = field(default="")
    _by_name: Mapping[str, Skill] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(
        cls,
        skills: Iterable[Skill],
        problems: Iterable[SkillProblem] = (),
        *,
        readable: bool = True,
    ) -> SkillSnapshot:
        """A snapshot of ``skills`` (sorted by name), its digest computed."""
        ordered = tuple(sorted(skills, key=lambda skill: skill.name))
        hasher = hashlib.sha256()
        for skill in ordered:
            hasher.update(f"{skill.name}\0{skill.path}\0{skill.sha256}\n".encode())
        hasher.update(b"readable" if readable else b"unreadable")
        return cls(
            skills=ordered,
            problems=tuple(problems),
            readable=readable,
            digest=hasher.hexdigest(),
            _by_name={skill.name: skill for skill in ordered},
        )

    def get(self, name: str) -> Skill | None:
        """The skill called ``name``, or None."""
        return self._by_name.get(name)

    def close_matches(self, name: str, limit: int = 5) -> list[str]:
        """Names of skills that look like ``name`` (a typo's likely targets), best first."""
        return difflib.get_close_matches(name, self.names, n=limit, cutoff=0.5)

    @property
    def names(self) -> tuple[str, ...]:
        """The skills' names, sorted."""
        return tuple(skill.name for skill in self.skills)


EMPTY_SNAPSHOT = SkillSnapshot.of(())
"""The snapshot of a graph with no skill sources."""
