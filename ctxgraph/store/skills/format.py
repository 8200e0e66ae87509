"""Parsing one ``SKILL.md``: YAML front matter between ``---`` lines, then a Markdown body."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping

from ctxgraph.state.front_matter import FrontMatterError, split_front_matter, string_field
from ctxgraph.store.skills.model import Skill, SkillProblem, SkillSource

__all__ = [
    "KNOWN_FIELDS",
    "MAX_COMPATIBILITY_CHARS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS",
    "NAME_PATTERN",
    "SkillFormatError",
    "parse_skill_md",
    "valid_skill_name",
]

NAME_PATTERN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
"""A skill name, matched whole: lowercase letters, digits and single inner hyphens."""

MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_COMPATIBILITY_CHARS = 500

KNOWN_FIELDS = frozenset(
    {"name", "description", "allowed-tools", "license", "compatibility", "metadata"}
)
"""Front-matter fields of the Agent Skills format; any other one is warned about."""

_Fail = Callable[[str | None, str], "SkillFormatError"]
"""Builds the error of one field: (field, message) -> the error to raise."""


class SkillFormatError(ValueError):
    """A ``SKILL.md`` that cannot be used; ``problem`` names the file and the field."""

    def __init__(self, problem: SkillProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def valid_skill_name(name: str) -> bool:
    """True when ``name`` is 1-64 lowercase letters, digits and single inner hyphens."""
    return len(name) <= MAX_NAME_CHARS and NAME_PATTERN.fullmatch(name) is not None


def parse_skill_md(
    text: str,
    *,
    file: str,
    folder_name: str | None,
    source: SkillSource,
    files: tuple[str, ...] = (),
) -> tuple[Skill, tuple[SkillProblem, ...]]:
    """The skill ``text`` describes, and its non-fatal problems; ``SkillFormatError`` if none.

    ``folder_name``, when given, must equal the skill's ``name``.
    """

    def fail(field: str | None, message: str) -> SkillFormatError:
        return SkillFormatError(SkillProblem(file=file, field=field, message=message))

    try:
        sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    except UnicodeEncodeError as error:
        raise fail(None, f"not valid Unicode text: {error.reason}") from None
    try:
        data, body = split_front_matter(text)
    except FrontMatterError as error:
        raise fail(None, str(error)) from None
    name = _name(data, folder_name, fail)
    description = _description(data, fail)
    allowed = _allowed_tools(data, fail)
    optional = _optional_fields(data, fail)
    warnings = tuple(
        [
            *optional,
            *(
                SkillProblem(
                    file=file, field=str(key), message="unknown front-matter field, ignored"
                )
                for key in data
                if key not in KNOWN_FIELDS
            ),
        ]
    )
    skill = Skill(
        name=name,
        description=description,
        allowed_tools=allowed,
        body=body,
        path=file,
        sha256=sha256,
        source=source,
        files=files,
    )
    return skill, warnings


def _name(data: Mapping[object, object], folder_name: str | None, fail: _Fail) -> str:
    name = string_field(data, "name", fail, missing="give the skill's folder name")
    if not valid_skill_name(name):
        raise fail(
            "name",
            f"{name!r} is not 1-{MAX_NAME_CHARS} lowercase letters, digits and hyphens "
            "(no leading, trailing or double hyphen)",
        )
    if folder_name is not None and name != folder_name:
        raise fail("name", f"{name!r} differs from its folder's name {folder_name!r}")
    return name


def _description(data: Mapping[object, object], fail: _Fail) -> str:
    description = string_field(
        data,
        "description",
        fail,
        missing="say what the skill does and when to use it",
        empty="is empty",
    )
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise fail(
            "description",
            f"is {len(description)} characters, over the limit of {MAX_DESCRIPTION_CHARS}",
        )
    return description


def _allowed_tools(data: Mapping[object, object], fail: _Fail) -> tuple[str, ...] | None:
    """The tool names, deduplicated in order; None when the field is absent."""
    if "allowed-tools" not in data:
        return None
    value = data["allowed-tools"]
    if value is None:
        names: list[str] = []
    elif isinstance(value, str):
        names = value.split()
    elif isinstance(value, list):
        names = []
        for index, item in enumerate(value):
            if not isinstance(item, str) or not item.strip() or len(item.split()) != 1:
                raise fail(
                    "allowed-tools",
                    f"item {index} ({item!r}) is not a tool name: give non-empty "
                    "strings without spaces",
                )
            names.append(item.strip())
    else:
        raise fail(
            "allowed-tools",
            f"must be a list of tool names or one space-separated string, "
            f"not {type(value).__name__}",
        )
    return tuple(dict.fromkeys(names))


def _optional_fields(data: Mapping[object, object], fail: _Fail) -> list[SkillProblem]:
    """Problems with ``license``, ``compatibility`` and ``metadata``.

    These fields only describe the skill, so a bad one is reported and ignored; the skill
    still loads.
    """
    problems: list[SkillProblem] = []

    def note(field: str, message: str) -> None:
        problems.append(fail(field, f"{message}; the field is ignored").problem)

    license_ = data.get("license")
    if license_ is not None and not isinstance(license_, str):
        note("license", f"must be a string, not {type(license_).__name__}")
    compatibility = data.get("compatibility")
    if compatibility is not None:
        if not isinstance(compatibility, str):
            note("compatibility", f"must be a string, not {type(compatibility).__name__}")
        elif not compatibility.strip() or len(compatibility) > MAX_COMPATIBILITY_CHARS:
            note(
                "compatibility",
                f"must be 1-{MAX_COMPATIBILITY_CHARS} characters, not {len(compatibility)}",
            )
    metadata = data.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            note("metadata", f"must be a mapping, not {type(metadata).__name__}")
        else:
            for key, value in metadata.items():
                if not isinstance(key, str) or not isinstance(value, str):
                    note(
                        "metadata",
                        f"entry {key!r}: {value!r} is not string to string (quote the value)",
                    )
                    break
    return problems
