"""The skill listing of every request: names, descriptions and refs within a fixed budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxgraph.store.skills import Skill

DESCRIPTION_CHARS = 250
"""Descriptions are cut to this many characters in the listing."""

SHORTER_DESCRIPTIONS = (120, 60)
"""Shorter cuts tried, in order, when the listing does not fit its budget."""

LISTING_HEADER = (
    "Skills you can use (name: description [ref]). When a task fits a skill, call "
    "load_skill(name) first and follow its instructions; read_skill_file(name, path) reads "
    "the files it mentions."
)
NAMES_HEADER = (
    "Skills you can use (names only: their descriptions did not fit). When a task may fit "
    "one, call load_skill(name) to read its instructions."
)
HIDDEN_LINE = (
    "[{hidden} more skill{s} not listed for lack of room; load_skill(name) loads any skill "
    "by its exact name]"
)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def cut_description(text: str, limit: int) -> str:
    """``text`` on one line, cut to at most ``limit`` characters at a word boundary."""
    line = _one_line(text)
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "…"


def _full(skills: Sequence[Skill], limit: int) -> str:
    lines = [LISTING_HEADER]
    lines.extend(
        f"- {skill.name}: {cut_description(skill.description, limit)} [{skill.path}]"
        for skill in skills
    )
    return "\n".join(lines)


def _names(skills: Sequence[Skill], shown: int) -> str:
    hidden = len(skills) - shown
    lines = [NAMES_HEADER] if shown else []
    if shown:
        lines.append(", ".join(skill.name for skill in skills[:shown]))
    if hidden:
        lines.append(HIDDEN_LINE.format(hidden=hidden, s="" if hidden == 1 else "s"))
    return "\n".join(lines)


def render_listing(skills: Sequence[Skill], budget: int, count: Callable[[str], int]) -> str:
    """The listing of ``skills`` (in their order) in at most ``budget`` tokens by ``count``.

    Each skill gets its name, its description cut at 250 characters and its ref. When that
    is over budget the descriptions are cut shorter, then only names remain; when even the
    names do not all fit, as many as fit are listed and one line says how many are hidden.
    The text depends only on its arguments, so an unchanged set of skills gives
    byte-identical listings turn after turn. No skills give "".
    """
    if not skills:
        return ""
    for limit in (DESCRIPTION_CHARS, *SHORTER_DESCRIPTIONS):
        text = _full(skills, limit)
        if count(text) <= budget:
            return text
    low, high = 0, len(skills)
    while low < high:  # the largest number of names that fits
        middle = (low + high + 1) // 2
        if count(_names(skills, middle)) <= budget:
            low = middle
        else:
            high = middle - 1
    return _names(skills, low)
