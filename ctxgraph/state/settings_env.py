"""Settings from the environment: which variable sets which setting, and how it is read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ctxgraph.state.settings_checks import SettingsError, split_paths


def parse_flag(raw: str) -> bool:
    """``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``, any case."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError("1/true/yes/on or 0/false/no/off")


ENVIRONMENT_SETTINGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "CTXGRAPH_CONTEXT_WINDOW": ("context_window", int),
    "CTXGRAPH_TRIGGER_TOKENS": ("trigger_tokens", int),
    "CTXGRAPH_TRIGGER_MESSAGES": ("trigger_messages", int),
    "CTXGRAPH_TRIGGER_FRACTION": ("trigger_fraction", float),
    "CTXGRAPH_KEEP_MESSAGES": ("keep_messages", int),
    "CTXGRAPH_COMPACTION_MODE": ("compaction_mode", str),
    "CTXGRAPH_SUMMARY_FALLBACK": ("summary_fallback", str),
    "CTXGRAPH_SUMMARY_REQUEST": ("summary_request", str),
    "CTXGRAPH_MEMORY_EXTRACTION": ("memory_extraction", str),
    "CTXGRAPH_MEMORY_WAIT_S": ("memory_wait_s", float),
    "CTXGRAPH_MEMORY_QUIET_SECONDS": ("memory_quiet_seconds", float),
    "CTXGRAPH_EXTRACTION_GATE": ("extraction_gate", parse_flag),
    "CTXGRAPH_MEMORY_MODE": ("memory_mode", str),
    "CTXGRAPH_MEMORY_BUDGET": ("memory_budget", int),
    "CTXGRAPH_MEMORY_AGE_FROM": ("memory_age_from", str),
    "CTXGRAPH_MEMORY_SEARCH_IN_AUTO": ("memory_search_in_auto", parse_flag),
    "CTXGRAPH_MEMORY_VIEW_MIN_SCORE": ("memory_view_min_score", float),
    "CTXGRAPH_MEMORY_VIEW_MAX_FACTS": ("memory_view_max_facts", int),
    "CTXGRAPH_SKILLS_DIRS": ("skills_dirs", split_paths),
    "CTXGRAPH_SKILLS_FROM_STORE": ("skills_from_store", parse_flag),
    "CTXGRAPH_SKILL_POLICY": ("skill_policy", str),
    "CTXGRAPH_CACHE_MARKERS": ("cache_markers", parse_flag),
    "CTXGRAPH_TEXT_TOOL_CALLS": ("text_tool_calls", str),
}
"""Environment variables that set a setting, with the setting and its type."""


def environment_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """The setting values the variables of ``ENVIRONMENT_SETTINGS`` in ``environ`` give.

    An unset or blank variable gives nothing. Raises ``SettingsError`` naming the variable
    when its text is not of its setting's type.
    """
    values: dict[str, Any] = {}
    for variable, (name, kind) in ENVIRONMENT_SETTINGS.items():
        raw = environ.get(variable, "").strip()
        if not raw:
            continue
        try:
            values[name] = kind(raw)
        except ValueError as error:
            wanted = _WANTED.get(kind, str(error))
            raise SettingsError(f"{variable} must be {wanted}, got {raw!r}") from None
    return values


_WANTED: dict[Callable[[str], Any], str] = {int: "a whole number", float: "a number"}
"""What a variable of a numeric setting must hold, as an error says it."""
