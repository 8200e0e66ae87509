"""Reads JSON objects out of a model's answer text, the way small local models write them.

Models that cannot (or did not) produce a real tool call often write the call, or the
structured answer they were asked for, as text: fenced (```` ```json ````), bare, inside
``<tool_call>``/``<tools>`` tags, with a doubled opening brace (``{{"name": …}}}``, a
chat-template escape copied into the answer), or with the last closing brace missing.
This module is the one reader of such text for every role (summary, memory extraction,
tool calls written as text): it finds each object, says where it sits in the text, and
what is left of the text around the objects once the usual wrappers are taken away.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_STARTS = 64
"""How many ``{`` positions of one answer are tried as the start of an object."""

MISSING_BRACES = 2
"""How many closing braces a truncated object may be missing and still be read."""

_WRAPPER = re.compile(
    r"```[ \t]*[A-Za-z0-9_-]*|</?(?:tool_call|tool_calls|tools|function_call|functions?)\s*>",
    re.IGNORECASE,
)
"""Fences (with their language tag) and the tags that models put around calls."""

_SEGMENT_END = re.compile(r"```|</")
"""Where a truncated object's text ends at the latest: a closing fence or tag."""


@dataclass(frozen=True)
class JsonSpan:
    """One JSON object read from an answer, and where its text sits."""

    value: dict[str, Any]
    """The decoded object."""
    start: int
    """Index of its first character in the answer (a doubled brace's second ``{``)."""
    end: int
    """Index just past its last character (past the braces a repair added: their count)."""
    repaired: str = ""
    """Empty when the text decoded as written, else what was repaired."""


def json_objects(text: str, *, nested: bool = True) -> Iterator[JsonSpan]:
    """Every JSON object in ``text``, outermost first, in the order they start.

    Args:
        text: A model's answer text.
        nested: Also yield objects that sit inside an object already yielded (useful
            when the wanted object may be wrapped: ``{"arguments": {...}}``). With False
            only top-level objects are yielded, each after the previous one's end.

    Returns:
        An iterator of :class:`JsonSpan`; at most ``MAX_STARTS`` starts are tried.

    """
    decoder = json.JSONDecoder()
    start = text.find("{")
    tried = 0
    while start != -1 and tried < MAX_STARTS:
        tried += 1
        span = _decode_at(decoder, text, start)
        if span is not None:
            yield span
            if not nested:
                start = text.find("{", max(span.end, start + 1))
                continue
        start = text.find("{", start + 1)


def top_level_objects(text: str) -> list[JsonSpan]:
    """The objects of ``text`` that no other object contains, in order."""
    return list(json_objects(text, nested=False))


def residue(text: str, spans: list[JsonSpan]) -> str:
    """What ``text`` says besides ``spans``: fences, call tags and stray braces removed.

    An empty result means the answer is nothing but the objects (written as a model
    writes a tool call as text).
    """
    parts: list[str] = []
    position = 0
    for span in sorted(spans, key=lambda item: item.start):
        parts.append(text[position : span.start])
        position = max(position, span.end)
    parts.append(text[position:])
    rest = _WRAPPER.sub(" ", " ".join(parts))
    return re.sub(r"[{}\s]+", " ", rest).strip()


def _decode_at(decoder: json.JSONDecoder, text: str, start: int) -> JsonSpan | None:
    """The object that starts at ``start``, decoded as written or with a missing end."""
    try:
        value, end = decoder.raw_decode(text, start)
    except ValueError:
        return _truncated(text, start)
    if not isinstance(value, dict):
        return None
    return JsonSpan(value=value, start=start, end=end)


def _truncated(text: str, start: int) -> JsonSpan | None:
    """The object at ``start`` whose last closing brace(s) the model left out, if any."""
    if text.startswith("{{", start):
        return None  # the doubled brace's second ``{`` is the object's real start
    match = _SEGMENT_END.search(text, start)
    stop = len(text) if match is None else match.start()
    segment = text[start:stop].rstrip()
    for missing in range(1, MISSING_BRACES + 1):
        try:
            value = json.loads(segment + "}" * missing)
        except ValueError:
            continue
        if isinstance(value, dict):
            return JsonSpan(
                value=value,
                start=start,
                end=start + len(segment),
                repaired=f"{missing} closing brace(s) added",
            )
    return None
