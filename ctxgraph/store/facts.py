"""A remembered fact as read back from the Store, and the one parser of stored values.

Every read of a fact or profile value goes through :func:`parse_fact` or
:func:`parse_profile`, which decode its text (``store.text_codec``): a value that is not
what ctxgraph writes (a missing or ill-typed field, not a mapping at all) becomes a
:class:`Problem` instead of an exception, is logged once per namespace and key per
process, and is skipped by every reader (the memory view, ``memory_search``, extraction,
the CLI); ``ctxgraph memory list --problems`` shows it.

Provenance: every fact says who wrote it (``PROVENANCES``). Only ``"extraction"`` passed
the acceptance gate. A value stored before provenance existed is read as
``"extraction"`` when it has the evidence and source thread extraction records, else as
``"unknown"``; so is any other value that claims ``"extraction"`` without them, and any
provenance ctxgraph never writes. A fact written by an import (``"import"``) may record
where it came from in ``imported`` (``IMPORTED_FIELDS``: the provenance it had in the
bundle, the digests of the bundle and of the fact, and when it was imported).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ctxgraph.store.text_codec import decoded

__all__ = [
    "IMPORTED_FIELDS",
    "PROVENANCES",
    "Fact",
    "FactScope",
    "Problem",
    "Provenance",
    "fact_from_value",
    "parse_fact",
    "parse_profile",
    "report_problem",
]

logger = logging.getLogger("ctxgraph.memory.values")

FactScope = Literal["user", "project"]
"""Where a fact lives: the user's facts for one agent, or a project's facts."""

Provenance = Literal["extraction", "api", "cli", "import", "unknown"]
"""Who wrote a fact: memory extraction through the acceptance gate, application code
(``MemoryRepository.add_fact``), the command line, an import, or nobody ctxgraph knows."""

PROVENANCES: tuple[Provenance, ...] = ("extraction", "api", "cli", "import", "unknown")

IMPORTED_FIELDS: tuple[str, ...] = ("from_provenance", "bundle_sha256", "fact_sha256", "at")
"""The fields of an imported fact's ``imported`` record (``store.memory.bundle``)."""


@dataclass(frozen=True)
class Fact:
    """One remembered fact, as read back from the Store."""

    id: str
    key: str
    content: str
    category: str
    confidence: float
    created_at: datetime
    confirmed_at: datetime
    last_seen_at: datetime
    source_thread: str | None
    evidence: str | None
    scope: FactScope
    history: list[dict[str, str]] = field(default_factory=list)
    is_correction: bool = False
    score: float = 0.0
    provenance: Provenance | None = None
    """Who wrote it; only ``"extraction"`` passed the acceptance gate. Every fact read from
    the Store has one; None (a record built by code, not read back) is not marked in the
    memory view, like a fact mapping without the field."""
    imported: dict[str, str] | None = None
    """For ``provenance="import"``: ``IMPORTED_FIELDS`` (``from_provenance`` is who wrote
    the fact before it was exported); None for every other fact."""

    @property
    def verified(self) -> bool:
        """Whether the fact passed ctxgraph's acceptance gate (written by extraction)."""
        return self.provenance == "extraction"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view, timestamps as ISO strings."""
        return {
            "id": self.id,
            "key": self.key,
            "content": self.content,
            "category": self.category,
            "confidence": self.confidence,
            "created_at": self.created_at.isoformat(),
            "confirmed_at": self.confirmed_at.isoformat(),
            "last_seen_at": self.last_seen_at.isoformat(),
            "source_thread": self.source_thread,
            "evidence": self.evidence,
            "scope": self.scope,
            "history": [dict(entry) for entry in self.history],
            "is_correction": self.is_correction,
            "provenance": self.provenance,
        } | ({} if self.imported is None else {"imported": dict(self.imported)})


@dataclass(frozen=True)
class Problem:
    """A stored memory value that cannot be read: where it is and what is wrong with it."""

    namespace: tuple[str, ...]
    key: str
    problem: str

    def describe(self) -> str:
        """``namespace/key: problem`` on one line."""
        return f"{'/'.join(self.namespace)}/{self.key}: {self.problem}"


_reported: set[tuple[tuple[str, ...], str]] = set()
_reported_lock = threading.Lock()


def report_problem(problem: Problem) -> None:
    """Log ``problem`` as a warning, once per namespace and key in this process."""
    marker = (problem.namespace, problem.key)
    with _reported_lock:
        if marker in _reported:
            return
        _reported.add(marker)
    logger.warning(
        "skipped malformed memory item %s (key %r in namespace %r): %s; "
        "see `ctxgraph memory list --problems`",
        "/".join(problem.namespace),
        problem.key,
        problem.namespace,
        problem.problem,
    )


class _MalformedError(ValueError):
    """What is wrong with one field."""


def _text(value: Mapping[str, Any], name: str, default: str | None = None) -> str:
    raw = value.get(name, default)
    if raw is None:
        raise _MalformedError(f"{name!r} is missing")
    if not isinstance(raw, str) or not raw.strip():
        raise _MalformedError(f"{name!r} must be a non-empty string, got {raw!r:.80}")
    return raw


def _optional_text(value: Mapping[str, Any], name: str) -> str | None:
    raw = value.get(name)
    if raw is not None and not isinstance(raw, str):
        raise _MalformedError(f"{name!r} must be a string or null, got {raw!r:.80}")
    return raw


def _moment(value: Mapping[str, Any], name: str, default: Any = None) -> datetime:
    raw = value.get(name, default)
    if raw is None:
        raise _MalformedError(f"{name!r} is missing")
    if not isinstance(raw, str):
        raise _MalformedError(f"{name!r} must be an ISO 8601 string, got {raw!r:.80}")
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        raise _MalformedError(f"{name!r} is not an ISO 8601 time: {raw!r:.80}") from None


def _confidence(value: Mapping[str, Any]) -> float:
    raw = value.get("confidence", 0.0)
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise _MalformedError(f"'confidence' must be a number from 0 to 1, got {raw!r:.80}")
    number = float(raw)
    if math.isnan(number) or not 0.0 <= number <= 1.0:
        raise _MalformedError(f"'confidence' must be a number from 0 to 1, got {raw!r:.80}")
    return number


def _history(value: Mapping[str, Any]) -> list[dict[str, str]]:
    raw = value.get("history", [])
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(
        isinstance(entry, Mapping) and all(isinstance(v, str) for v in entry.values())
        for entry in raw
    ):
        raise _MalformedError(f"'history' must be a list of string mappings, got {raw!r:.80}")
    return [{str(k): v for k, v in entry.items()} for entry in raw]


def _imported(value: Mapping[str, Any], provenance: Provenance) -> dict[str, str] | None:
    """The ``imported`` record of an imported fact, None for any other fact."""
    raw = value.get("imported")
    if raw is None or provenance != "import":
        return None
    if not isinstance(raw, Mapping) or not all(
        isinstance(raw.get(name), str) for name in IMPORTED_FIELDS
    ):
        raise _MalformedError(
            f"'imported' must map {', '.join(IMPORTED_FIELDS)} to strings, got {raw!r:.80}"
        )
    if raw["from_provenance"] not in PROVENANCES:
        raise _MalformedError(
            f"'imported.from_provenance' must be one of {', '.join(PROVENANCES)}, "
            f"got {raw['from_provenance']!r:.80}"
        )
    return {name: str(raw[name]) for name in IMPORTED_FIELDS}


def _provenance(
    value: Mapping[str, Any], evidence: str | None, source_thread: str | None
) -> Provenance:
    """The provenance a stored value earns (see the module docstring)."""
    raw = value.get("provenance")
    gated = bool(evidence and evidence.strip()) and bool(source_thread and source_thread.strip())
    if raw is None or raw == "extraction":
        return "extraction" if gated else "unknown"
    for known in PROVENANCES:
        if raw == known:
            return known
    return "unknown"


def _fact(key: str, value: Mapping[str, Any], scope: FactScope) -> Fact:
    """The fact of a stored value; ``_MalformedError`` names the first field that is wrong."""
    created = _moment(value, "created_at")
    stored_key = value.get("key", key)
    if not isinstance(stored_key, str) or not stored_key:
        raise _MalformedError(f"'key' must be a non-empty string, got {stored_key!r:.80}")
    evidence = _optional_text(value, "evidence")
    source_thread = _optional_text(value, "source_thread")
    provenance = _provenance(value, evidence, source_thread)
    return Fact(
        id=key,
        key=stored_key,
        content=_text(value, "content"),
        category=_text(value, "category", "context"),
        confidence=_confidence(value),
        created_at=created,
        confirmed_at=_moment(value, "confirmed_at", value["created_at"]),
        last_seen_at=_moment(value, "last_seen_at", value["created_at"]),
        source_thread=source_thread,
        evidence=evidence,
        scope=scope,
        history=_history(value),
        is_correction=bool(value.get("is_correction", False)),
        provenance=provenance,
        imported=_imported(value, provenance),
    )


def parse_fact(
    namespace: tuple[str, ...], key: str, value: object, scope: FactScope = "user"
) -> Fact | Problem:
    """The fact stored under ``key`` of ``namespace``, or the ``Problem`` that stops it.

    Never raises for a bad value: anything but a mapping with a non-empty ``content``, an
    ISO ``created_at`` (and ISO ``confirmed_at``/``last_seen_at`` when present), a
    ``confidence`` from 0 to 1, string ``category``/``key``/``evidence``/``source_thread``
    and a list ``history`` (and, on an imported fact, an ``imported`` record of strings)
    is a ``Problem``. The caller decides whether to report it
    (:func:`report_problem`).
    """
    if not isinstance(value, Mapping):
        return Problem(namespace, key, f"the value is a {type(value).__name__}, not a mapping")
    try:
        return _fact(key, decoded(value), scope)
    except _MalformedError as error:
        return Problem(namespace, key, str(error))


def fact_from_value(key: str, value: Mapping[str, Any], scope: FactScope) -> Fact:
    """The ``Fact`` stored under ``key`` with ``value``; ValueError naming what is wrong.

    For values already checked by :func:`parse_fact` (the index holds only those).
    """
    parsed = parse_fact((), key, value, scope)
    if isinstance(parsed, Problem):
        raise ValueError(f"malformed fact {key!r}: {parsed.problem}")
    return parsed


def parse_profile(namespace: tuple[str, ...], key: str, value: object) -> dict[str, str] | Problem:
    """The sections of a stored profile value, or the ``Problem`` that stops it.

    A profile is a mapping whose ``sections`` (when present) map section names to strings.
    """
    if not isinstance(value, Mapping):
        return Problem(namespace, key, f"the value is a {type(value).__name__}, not a mapping")
    sections = decoded(value.get("sections", {}))
    if sections is None:
        return {}
    if not isinstance(sections, Mapping):
        return Problem(namespace, key, f"'sections' must be a mapping, got {sections!r:.80}")
    for name, text in sections.items():
        if not isinstance(name, str) or not isinstance(text, str):
            return Problem(namespace, key, f"section {name!r} must be a string, got {text!r:.80}")
    return dict(sections)
