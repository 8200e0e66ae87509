"""The four summary sections: their keys, headings, what each holds, and the lenient parser.

Every place that names a section (the summary prompts, the parser, the checks, the
rendering of a record, the model-free record) takes it from here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxgraph.state.answer_json import top_level_objects


@dataclass(frozen=True)
class Section:
    """One section of a summary record."""

    key: str
    """The record's field (``CompactionSummary``)."""
    title: str
    """The heading it is written under."""
    guide: str
    """What the summary prompt asks it to hold."""
    aliases: tuple[str, ...] = ()
    """Other headings (and JSON keys) a model may write for it: Chinese, with ``_``."""
    json_aliases: tuple[str, ...] = ()
    """Further keys of a JSON answer that name it."""


SECTION_LIST: tuple[Section, ...] = (
    Section(
        "session_intent",
        "SESSION INTENT",
        "the user's goal and explicit constraints, in their own words where possible.",
        ("SESSION_INTENT", "会话意图"),
        ("intent",),
    ),
    Section(
        "summary",
        "SUMMARY",
        "what happened and what was decided, including failures and anything unresolved.",
        ("摘要",),
    ),
    Section(
        "artifacts",
        "ARTIFACTS",
        "exact identifiers, file paths, amounts, dates and tool-call ids that matter.",
        ("产出物", "工件"),
    ),
    Section(
        "next_steps",
        "NEXT STEPS",
        "what remains to be done, in order.",
        ("NEXT_STEPS", "下一步"),
    ),
)
"""The sections in the order they are written."""

SECTIONS: tuple[tuple[str, str], ...] = tuple((s.key, s.title) for s in SECTION_LIST)
"""Summary fields and the headings they are written under, in order."""

TITLES: dict[str, str] = dict(SECTIONS)
"""The heading of each field."""

HEADINGS = ", ".join(title for _, title in SECTIONS)
"""The four headings, in order: ``SESSION INTENT, SUMMARY, ARTIFACTS, NEXT STEPS``."""

GUIDE = "\n".join(f"{s.title}: {s.guide}" for s in SECTION_LIST)
"""A line per section saying what it holds, as the summary prompt asks for it."""

_KEYS: dict[str, str] = {name: s.key for s in SECTION_LIST for name in (s.title, *s.aliases)}
"""Every heading the lenient parser accepts (any case), and the field it names."""

_JSON_KEYS: dict[str, str] = {
    **{name.lower().replace(" ", "_"): key for name, key in _KEYS.items()},
    **{name: s.key for s in SECTION_LIST for name in s.json_aliases},
}

_NAMES = "|".join(
    dict.fromkeys(  # one alternative a heading; the English ones first
        re.sub(r"[ _]", "[ _]", name) for name in sorted(_KEYS, key=lambda n: not n.isascii())
    )
)
_BLANK = r"[ \t]*"
_MARKUP = r"(?:\*\*|__|\*)"
"""Bold or italic markers around a heading."""
_NUMBERING = r"(?:\(?\d{1,2}[.):][ \t]*)?"
_OPENING = rf"^{_BLANK}(?:#{{1,6}}{_BLANK})?{_NUMBERING}{_MARKUP}?{_BLANK}{_NUMBERING}"
"""What may stand before a heading's name: markdown, numbering, bold."""
_CLOSING = rf"{_BLANK}{_MARKUP}?{_BLANK}(?:[:：](?:{_BLANK}{_MARKUP}(?=[ \t]|$))?|(?={_BLANK}$))"
"""What ends a heading: a colon (half- or full-width), or the end of its line."""
_HEADING = re.compile(rf"{_OPENING}({_NAMES}){_CLOSING}{_BLANK}", re.MULTILINE | re.IGNORECASE)
"""A heading on a line of its own or before its text."""
_CHATTER = re.compile(
    r"^[ \t]*(?:-{3,}|\*{3,}|_{3,}|```|(?:let me know|i hope|hope this|feel free|"
    r"if you (?:need|want|have)|is there anything|happy to help)\b).*",
    re.MULTILINE | re.IGNORECASE | re.DOTALL,
)


def render_sections(summary: Mapping[str, Any]) -> str:
    """The four sections under their headings."""
    return "\n\n".join(f"{title}\n{summary.get(key, '').strip()}" for key, title in SECTIONS)


def find_sections(text: str) -> dict[str, str]:
    """The sections a model's answer holds, by field; those it lacks are left out.

    Lenient: headings may be markdown (``## Summary``), bold (``**Next steps:**``),
    numbered (``1. Session intent``), of any case or Chinese (会话意图, 摘要, 产出物 or
    工件, 下一步); an answer that is one JSON object naming sections is read as that
    object (fenced or not, read by ``state.answer_json``). Chatter before the first
    heading, and a closing remark after the last section, are dropped.
    """
    return _json_sections(text) or _heading_sections(text)


def missing_titles(found: Mapping[str, str]) -> list[str]:
    """The headings of the sections ``found`` lacks or holds empty, in order."""
    return [title for key, title in SECTIONS if not found.get(key)]


def _heading_sections(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    matches = list(_HEADING.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end]
        if index + 1 == len(matches):
            body = _CHATTER.sub("", body)
        key = _KEYS[re.sub(r"[ _]+", " ", match.group(1)).upper()]
        if not found.get(key):
            found[key] = body.strip()
    return found


def _json_sections(text: str) -> dict[str, str]:
    """The sections of the one JSON object ``text`` holds; empty when it holds not one."""
    objects = top_level_objects(text)
    if len(objects) != 1:
        return {}
    found: dict[str, str] = {}
    for name, item in objects[0].value.items():
        key = _JSON_KEYS.get(re.sub(r"[\s-]+", "_", str(name).strip()).lower())
        if key is None:
            key = _KEYS.get(str(name).strip())
        if key is not None and not found.get(key):
            found[key] = _json_text(item).strip()
    return found


def _json_text(item: object) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, list):
        return "\n".join(f"- {_json_text(entry)}" for entry in item)
    return json.dumps(item, ensure_ascii=False, sort_keys=True)
