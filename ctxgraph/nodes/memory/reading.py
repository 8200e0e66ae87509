"""Reads a memory model's answer into candidates fact by fact: tool call, JSON text or lines.

A small model rarely writes the ``MemoryUpdate`` schema whole: it writes the call as JSON
text (fenced, with a doubled brace, ``"function"`` for ``"name"``, a lower-case name, a
bare ``{"facts": [...]}``, ``"arguments"`` as a list of facts) and leaves fields out.
Each fact is read on its own, so one bad fact drops that fact, not the update, with the
field that made it fail. Where a field has a safe default it gets it (``DEFAULTS``);
the gate (``accept_candidate``) then decides on every candidate, however it was read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pydantic import ValidationError

from ctxgraph.state.answer_json import json_objects
from ctxgraph.store.memory.cues import states_durable_fact
from ctxgraph.store.memory.rules import (
    UNCITED,
    Category,
    FactCandidate,
    MemoryUpdate,
    ProfileUpdate,
    unlabelled,
)
from ctxgraph.store.memory.writes import default_key
from ctxgraph.store.text_codec import decoded, encoded

Source = Literal["tool call", "answer text", "lines"]
Candidate = FactCandidate | ProfileUpdate

DEFAULTS = {
    "category": "context, when missing or not one of the four (it only orders the view)",
    "authority": (
        "transactional, when missing: the strictest label; the gate lifts it only when the "
        "quote states a durable fact and asks for no action"
    ),
    "evidence_message_id": (
        f"{UNCITED!r}, when missing: the gate cites the one user message holding the quote"
    ),
    "content": (
        "the quote (without a speaker label), when missing and the quote states a durable "
        "fact by the cues; otherwise the fact is dropped"
    ),
    "key": (
        "derived from the content (a slug and a digest, as for a fact stored without a "
        "key), when missing: only the same content shares it, so it never replaces "
        "another fact"
    ),
}
"""The fields a fact may lack, and what it gets instead. ``scope``, ``durability``,
``confidence`` and ``evidence_text`` have no default: a fact without one is dropped
(a confidence is never made up, and a scope or durability is a judgement the gate
needs from the model)."""

MAX_ITEMS = 20
"""Most facts (and most profile updates) one answer may hold, as ``MemoryUpdate`` says."""

_CATEGORIES = frozenset(get_args(Category))
_FACT_FIELDS = frozenset(FactCandidate.model_fields)
_PROFILE_FIELDS = frozenset(ProfileUpdate.model_fields)
_REQUIRED = ("scope", "durability", "confidence", "evidence_text")
_WRAPPERS = ("arguments", "args", "parameters", "input")
"""Keys under which a model that writes its tool call as text puts the arguments."""
_LISTS = ("facts", "profile_updates")


@dataclass
class Reading:
    """What one answer held: its candidates, and what was dropped or defaulted and why."""

    source: Source
    """Where the candidates were read: the tool call, JSON in the text, or plain lines."""
    candidates: list[Candidate] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    """``(label, reason)`` of each item that was not read (label: its key, else its place)."""
    defaults: list[str] = field(default_factory=list)
    """Each default given, e.g. ``facts[0] category 'context'``."""
    facts: int = 0
    """How many facts the answer listed."""
    profile_updates: int = 0
    """How many profile updates the answer listed."""
    problem: str | None = None
    """Why nothing usable was read; None when the reading is usable."""

    @property
    def usable(self) -> bool:
        """True when something was read, or the answer listed nothing (a fine answer)."""
        return self.problem is None and (bool(self.candidates) or not self.dropped)

    def summary(self) -> str:
        """What happened, for the log: ``read 2 of 3 facts from the answer text; …``."""
        fact_count = sum(isinstance(c, FactCandidate) for c in self.candidates)
        parts = [f"{fact_count} of {self.facts} facts"]
        if self.profile_updates:
            read = len(self.candidates) - fact_count
            parts.append(f"{read} of {self.profile_updates} profile updates")
        text = f"read {' and '.join(parts)} from the {self.source}"
        if self.defaults:
            text += f" (defaults: {', '.join(self.defaults)})"
        if self.dropped:
            reasons = "; ".join(reason for _, reason in self.dropped)
            text += f"; {len(self.dropped)} dropped: {reasons}"
        return text


def unreadable(source: Source, problem: str) -> Reading:
    """A reading of an answer that held nothing to read, and why."""
    return Reading(source=source, problem=problem)


def read_update(value: Any, source: Source) -> Reading:
    """The candidates of a ``MemoryUpdate`` (tool arguments, or an object in the text).

    Args:
        value: The update's arguments, or an object wrapping them as a tool call written
            out (``{"name": "MemoryUpdate", "arguments": {...}}``).
        source: Where ``value`` came from (named in the log).

    Returns:
        The reading: each fact and profile update validated on its own.

    """
    if not isinstance(value, Mapping):
        return unreadable(source, f"the arguments are not an object ({type(value).__name__})")
    payload = update_payload(value)
    if payload is None and value:
        keys = ", ".join(sorted(map(str, value)))
        return unreadable(source, f"the arguments hold no facts or profile_updates ({keys})")
    payload = payload or {}
    reading = Reading(source=source)
    for name in _LISTS:
        items = payload.get(name, [])
        if not isinstance(items, list):
            reading.dropped.append((name, f"{name} is not a list ({type(items).__name__})"))
            continue
        for index, item in enumerate(items):
            kind = name
            if name == "facts" and isinstance(item, Mapping) and _is_profile(item):
                kind = "profile_updates"  # a list of arguments mixes both kinds
            _read_item(reading, item, f"{name}[{index}]", kind, index)
    return reading


def update_payload(value: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``MemoryUpdate`` arguments in ``value``, or None when it is another object.

    Accepts the arguments themselves (``{"facts": [...]}``) and a call written out:
    ``"name"`` or ``"function"`` naming ``MemoryUpdate`` in any case or spelling
    (``memory_update``), the OpenAI form (``{"function": {"name", "arguments"}}``), and
    arguments given as an object, a JSON string or a list of facts.
    """
    if set(_LISTS) & value.keys():
        return value
    function = value.get("function")
    if isinstance(function, Mapping):
        return update_payload(function)
    name = value.get("name", function)
    named = isinstance(name, str) and re.sub(r"[^a-z]", "", name.lower()) == "memoryupdate"
    for key in _WRAPPERS:
        inner = value.get(key)
        if isinstance(inner, str):
            try:
                inner = json.loads(inner)
            except ValueError:
                continue
        if isinstance(inner, Mapping) and (named or set(_LISTS) & inner.keys()):
            return inner
        if isinstance(inner, list) and named:
            return {"facts": inner}
    return None


def read_text(text: str) -> Reading | None:
    """The reading of the first ``MemoryUpdate`` written in ``text``; None when it holds none.

    Objects are found by the shared reader (``json_objects``: fences, call tags, a
    doubled opening brace, a missing closing brace), outermost first.
    """
    for span in json_objects(text):
        payload = update_payload(span.value)
        if payload is not None:
            return read_update(payload, "answer text")
    return None


def update_from_text(text: str) -> MemoryUpdate | None:
    """The ``MemoryUpdate`` written in ``text`` (its readable candidates), or None.

    Args:
        text: A memory model's answer text.

    Returns:
        The candidates :func:`read_text` could read (a fact it had to drop is left out),
        or None when the text holds no ``MemoryUpdate`` object.

    """
    reading = read_text(text)
    if reading is None:
        return None
    return MemoryUpdate(
        facts=[c for c in reading.candidates if isinstance(c, FactCandidate)],
        profile_updates=[c for c in reading.candidates if isinstance(c, ProfileUpdate)],
    )


LINE_FORMAT = 'key | content | category | "quote"'
"""The plain line format of the extraction ladder's last rung (``LINE_PROMPT``)."""

_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_QUOTES = "\"'“”‘’「」『』`"
_NONE = re.compile(r"^\W*none\W*$", re.IGNORECASE)
_RULE = re.compile(r"^[\s|:-]+$")


def read_lines(text: str, confidence: float) -> Reading:
    """The facts of an answer in the plain line format, each read as one JSON fact would be.

    Each line is ``key | content | category | "quote"`` (the category may be left out);
    bullets, a header line, table rules and fences are skipped, and ``NONE`` is a fine
    answer. A line's fact is about the user, durable and ``transactional`` (the gate
    keeps it only when its quote states a durable fact by the cues and asks for no
    action), cites no message (the gate cites the one user message holding the quote),
    and has ``confidence``: the lowest the gate accepts, never more.

    Args:
        text: The model's answer to ``LINE_PROMPT``.
        confidence: The confidence threshold of this extraction.

    Returns:
        The reading; its ``problem`` says why when no line could be read.

    """
    reading = Reading(source="lines")
    said_none = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _BULLET.sub("", raw).strip()
        if _not_a_line(line):
            continue
        if _NONE.match(line):
            said_none = True
            continue
        _read_line(reading, line, f"line {number}", confidence)
    if not reading.facts and not said_none:
        reading.problem = _no_lines_problem(text)
    return reading


def _not_a_line(line: str) -> bool:
    """True for a blank line, a fence or a table rule: nothing to read in it."""
    return not line or line.startswith("```") or bool(_RULE.match(line))


def _read_line(reading: Reading, line: str, label: str, confidence: float) -> None:
    """Read one ``key | content | category | "quote"`` line's fact into ``reading``."""
    if "|" not in line:
        return  # chatter around the lines ("Here are the facts:")
    parts = [part.strip() for part in line.strip("|").split("|")]
    if [p.strip(_QUOTES).lower() for p in parts[:4]] == ["key", "content", "category", "quote"]:
        return  # the format copied as a header
    if len(parts) < 3:
        reading.facts += 1
        reading.dropped.append((label, f"{label} is not in the format {LINE_FORMAT}"))
        return
    _read_item(reading, _line_fact(parts, confidence), label, "facts", reading.facts)


def _line_fact(parts: list[str], confidence: float) -> dict[str, Any]:
    """The fact of a line's ``parts``: about the user, durable, transactional, uncited."""
    key, content, *rest = parts
    category = rest[0] if len(rest) > 1 else None
    quote = "|".join(rest[1:] if len(rest) > 1 else rest).strip().strip(_QUOTES).strip()
    return {
        "key": key,
        "content": content,
        "category": category,
        "scope": "user",
        "durability": "durable",
        "authority": "transactional",
        "confidence": confidence,
        "evidence_message_id": UNCITED,
        "evidence_text": quote,
    }


def _no_lines_problem(text: str) -> str:
    """Why an answer to the line prompt gave no fact: empty, or no line in the format."""
    if not text.strip():
        return "an empty answer to the line prompt"
    return f"no line in the format {LINE_FORMAT} and no NONE ({len(text)} chars)"


def _is_profile(item: Mapping[str, Any]) -> bool:
    return "section" in item and "key" not in item


def _read_item(reading: Reading, item: Any, label: str, kind: str, index: int) -> None:
    """Read one listed fact or profile update into ``reading`` (or drop it, with why)."""
    _count_item(reading, kind)
    unlisted = _unlisted(item, label, index)
    if unlisted is not None:
        reading.dropped.append((label, unlisted))
        return
    values = _given_fields(item, kind)
    name_of = values.get("key") if isinstance(values.get("key"), str) else None
    notes: list[str] = []
    if kind == "facts":
        _fact_defaults(values, label, notes)
    missing = _missing_fields(values, kind)
    if missing:
        reading.dropped.append((name_of or label, f"{label} missing {', '.join(missing)}"))
        return
    _label_defaults(values, label, notes)
    try:
        reading.candidates.append(_candidate(values, kind))
    except ValidationError as error:
        reading.dropped.append((name_of or label, f"{label} {_invalid(error)}"))
        return
    reading.defaults.extend(notes)


def _count_item(reading: Reading, kind: str) -> None:
    """Count one listed item of ``kind`` (``facts`` or ``profile_updates``) in ``reading``."""
    if kind == "facts":
        reading.facts += 1
    else:
        reading.profile_updates += 1


def _unlisted(item: Any, label: str, index: int) -> str | None:
    """Why ``item`` cannot be read at all (past ``MAX_ITEMS``, not an object), else None."""
    if index >= MAX_ITEMS:
        return f"{label} is beyond the {MAX_ITEMS} an answer may hold"
    if not isinstance(item, Mapping):
        return f"{label} is not an object ({type(item).__name__})"
    return None


def _given_fields(item: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The schema fields of a ``kind`` item that ``item`` gives (not None, not blank)."""
    fields = _FACT_FIELDS if kind == "facts" else _PROFILE_FIELDS
    return {name: item[name] for name in fields if _given(item.get(name))}


def _missing_fields(values: Mapping[str, Any], kind: str) -> list[str]:
    """The required fields of a ``kind`` item that ``values`` lacks, in schema order."""
    own = ("key", "content") if kind == "facts" else ("section", "content")
    return [name for name in (*_REQUIRED, *own) if name not in values]


def _label_defaults(values: dict[str, Any], label: str, notes: list[str]) -> None:
    """Default a missing authority and evidence message id, noting each in ``notes``."""
    if "authority" not in values:
        values["authority"] = "transactional"
        notes.append(f"{label} authority 'transactional'")
    if "evidence_message_id" not in values:
        values["evidence_message_id"] = UNCITED
        notes.append(f"{label} evidence_message_id {UNCITED!r}")


def _candidate(values: Mapping[str, Any], kind: str) -> Candidate:
    """``values`` validated as a fact or a profile update (raises ``ValidationError``).

    Validated encoded (``store.text_codec``: pydantic cannot hold a lone surrogate), then
    given back its exact text.
    """
    model: type[Candidate] = FactCandidate if kind == "facts" else ProfileUpdate
    checked = model.model_validate(encoded(values))
    return checked.model_copy(update=decoded(dict(checked)))


def _fact_defaults(values: dict[str, Any], label: str, notes: list[str]) -> None:
    """Give a fact the defaults of ``DEFAULTS`` it needs, noting each in ``notes``."""
    category = values.get("category")
    if category not in _CATEGORIES:
        values["category"] = "context"
        was = "" if category is None else f" (was {category!r})"
        notes.append(f"{label} category 'context'{was}")
    quote = values.get("evidence_text")
    if "content" not in values and isinstance(quote, str) and states_durable_fact(quote):
        values["content"] = unlabelled(quote)
        notes.append(f"{label} content from its quote")
    content = values.get("content")
    if "key" not in values and isinstance(content, str):
        values["key"] = default_key(content)
        notes.append(f"{label} key {values['key']!r} from its content")


def _given(value: Any) -> bool:
    """False for a missing field: None, or a blank string."""
    return value is not None and not (isinstance(value, str) and not value.strip())


def _invalid(error: ValidationError) -> str:
    """``invalid confidence: Input should be …`` for the first problem of ``error``."""
    details = error.errors()
    if not details:
        return "invalid"
    first = details[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "value"
    return f"invalid {where}: {first.get('msg', 'invalid')}"
