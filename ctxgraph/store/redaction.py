"""Finding and replacing forgotten text wherever ctxgraph keeps a copy of it.

A :class:`Redactor` holds the texts to forget (its *needles*) and replaces each
occurrence with :data:`REDACTION_MARKER`, in a string, in nested JSON values and in
LangChain messages. Messages keep their id, type, name, tool-call ids and the pairing of
calls and results; only text changes. Matching ignores case and treats any run of
whitespace in a needle as any run of whitespace, so a sentence re-wrapped in a summary is
still found; a needle that starts or ends with a latin letter or digit does not match
inside a longer word (``Zed`` is not found in ``Zedekiah``). The longest needle is
tried first, so a whole evidence sentence goes as one redaction rather than leaving
fragments around an identifier in it.

``Redactor.for_fact`` forgets a stored fact: its content, its evidence, what its history
held, and the identifiers in those texts (numbers with four or more digits, e-mail
addresses, links), so a phone number in the fact is also removed from a pasted document
that never quoted the fact's sentence.

The marker says nothing about what was removed. What was removed is named only by the
receipt's SHA-256 digest (:attr:`Redactor.digest`); for a short secret such as a phone
number that digest can be matched by trying candidates, so receipts are kept where only
operators read them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

__all__ = [
    "KEPT_KEYS",
    "MIN_NEEDLE",
    "REDACTION_MARKER",
    "RedactionError",
    "Redactor",
    "identifiers_in",
]

REDACTION_MARKER = "[redacted]"
"""What replaces every occurrence of forgotten text."""

MIN_NEEDLE = 3
"""The shortest text that may be forgotten (after trimming): shorter ones match everywhere.

A text with a character outside ASCII (a Chinese name is two characters) may be one
shorter."""

KEPT_KEYS = frozenset(
    {
        "id",
        "type",
        "role",
        "thread_id",
        "user_id",
        "agent_name",
        "project_id",
        "tool_call_id",
        "call_id",
        "checkpoint_id",
        "run_id",
    }
)
"""Mapping keys whose values are structure, not content: never redacted.

Ids, message types and identities hold the shape of what ctxgraph stored (which thread
a queued extraction belongs to, which call a result answers); forgetting a text that
happens to equal a user id or a message type must not break them."""

_IDENTIFIERS = (
    re.compile(r"(?:https?://|www\.)[^\s<>\"'`，。；！？、（）【】「」]+"),
    re.compile(r"(?<![\w.+-])[\w.%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
    re.compile(r"(?<![\w])\+?\d[\d\- .()/]*\d(?![\w])"),
)
"""Links, e-mail addresses and digit groups (a candidate number keeps four digits or more)."""

_MIN_DIGITS = 4


class RedactionError(ValueError):
    """The text to forget cannot be used: empty, too short, or not text."""


def identifiers_in(text: str) -> list[str]:
    """The links, e-mail addresses and numbers of four or more digits in ``text``."""
    found: list[str] = []
    for pattern in _IDENTIFIERS:
        for match in pattern.finditer(text):
            token = match.group(0).strip(" .()/-")
            if pattern is _IDENTIFIERS[-1] and sum(c.isdigit() for c in token) < _MIN_DIGITS:
                continue
            if token and token not in found:
                found.append(token)
    return found


def _pattern(needle: str) -> str:
    """The needle's regex: any whitespace run, and no match inside a longer ASCII word."""
    body = r"\s+".join(re.escape(part) for part in needle.split())
    head = r"(?<![A-Za-z0-9])" if _ascii_word(needle[0]) else ""
    tail = r"(?![A-Za-z0-9])" if _ascii_word(needle[-1]) else ""
    return head + body + tail


def _ascii_word(char: str) -> bool:
    return char.isascii() and char.isalnum()


@dataclass(frozen=True)
class Redactor:
    """Replaces every occurrence of its needles with :data:`REDACTION_MARKER`.

    Attributes:
        needles: the texts to remove, longest first, each at least ``MIN_NEEDLE``
            characters after trimming.
        kind: what is forgotten, for receipts and archive records: ``"fact"`` or
            ``"text"``.

    """

    needles: tuple[str, ...]
    kind: str = "text"
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cleaned = _cleaned(self.needles)
        object.__setattr__(self, "needles", cleaned)
        alternatives = "|".join(_pattern(needle) for needle in cleaned)
        object.__setattr__(self, "_regex", re.compile(alternatives, re.IGNORECASE))

    @classmethod
    def for_text(cls, text: str) -> Redactor:
        """A redactor of one given text (``forget --text``)."""
        return cls((text,), kind="text")

    @classmethod
    def for_fact(cls, value: Mapping[str, Any]) -> Redactor:
        """A redactor of a stored fact's value: content, evidence, history, identifiers.

        Texts shorter than ``MIN_NEEDLE`` are skipped; a fact with no usable text at all
        raises :class:`RedactionError`.
        """
        texts = list(_fact_texts(value))
        atoms = [atom for text in texts for atom in identifiers_in(text)]
        usable = [text for text in [*texts, *atoms] if len(text.strip()) >= _shortest(text)]
        if not usable:
            raise RedactionError("the fact holds no text to forget")
        return cls(tuple(usable), kind="fact")

    @property
    def digest(self) -> str:
        """SHA-256 hex of the needles (sorted, one per line): names what was removed."""
        joined = "\n".join(sorted(self.needles))
        return hashlib.sha256(joined.encode("utf-8")).hexdigest()

    def count(self, text: str) -> int:
        """How many occurrences of the needles ``text`` holds."""
        return sum(1 for _ in self._regex.finditer(text))

    def text(self, text: str) -> tuple[str, int]:
        """``text`` with every occurrence replaced, and how many were replaced."""
        return self._regex.subn(REDACTION_MARKER, text)

    def value(self, value: Any) -> tuple[Any, int]:
        """A copy of a JSON-like value or message with every string redacted, and the count.

        Mappings keep their keys and the values of ``KEPT_KEYS``; lists and tuples keep
        their length and order; messages keep id, name, type and tool-call ids. Anything
        else (numbers, None, objects that are not messages) is returned as it is. An
        unchanged value is returned itself.
        """
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, BaseMessage):
            return self._message(value)
        if isinstance(value, Mapping):
            return self._mapping(value)
        if isinstance(value, list | tuple):
            return self._sequence(value)
        return value, 0

    def _mapping(self, value: Mapping[str, Any]) -> tuple[Any, int]:
        total = 0
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if key in KEPT_KEYS:
                out[key] = item
                continue
            out[key], found = self.value(item)
            total += found
        return (out if total else value), total

    def _sequence(self, value: list[Any] | tuple[Any, ...]) -> tuple[Any, int]:
        total = 0
        items: list[Any] = []
        for item in value:
            redacted, found = self.value(item)
            items.append(redacted)
            total += found
        if not total:
            return value, 0
        return (tuple(items) if isinstance(value, tuple) else items), total

    def _message(self, message: BaseMessage) -> tuple[BaseMessage, int]:
        update: dict[str, Any] = {}
        total = 0
        fields = ["content", "additional_kwargs", "response_metadata"]
        if isinstance(message, AIMessage):
            fields += ["tool_calls", "invalid_tool_calls"]
        if isinstance(message, ToolMessage):
            fields.append("artifact")
        for name in fields:
            redacted, found = self.value(getattr(message, name))
            if found:
                update[name] = redacted
                total += found
        if not total:
            return message, 0
        return message.model_copy(update=update), total


def _shortest(text: str) -> int:
    return MIN_NEEDLE if text.isascii() else MIN_NEEDLE - 1


def _cleaned(needles: Iterable[str]) -> tuple[str, ...]:
    """Trimmed, de-duplicated needles, longest first; raises on an unusable one."""
    out: list[str] = []
    for needle in needles:
        if not isinstance(needle, str):
            raise RedactionError(f"text to forget must be a string, got {type(needle).__name__}")
        text = " ".join(needle.split())
        if len(text) < _shortest(text):
            raise RedactionError(
                f"text to forget must hold at least {MIN_NEEDLE} characters, got {needle!r}"
            )
        if text.casefold() not in {kept.casefold() for kept in out}:
            out.append(text)
    if not out:
        raise RedactionError("no text to forget was given")
    return tuple(sorted(out, key=len, reverse=True))


def _fact_texts(value: Mapping[str, Any]) -> Iterable[str]:
    """The fact's content and evidence, then what each history entry held."""
    for name in ("content", "evidence"):
        text = value.get(name)
        if isinstance(text, str) and text.strip():
            yield text
    history = value.get("history")
    if isinstance(history, list):
        for entry in history:
            text = entry.get("content") if isinstance(entry, Mapping) else None
            if isinstance(text, str) and text.strip():
                yield text
