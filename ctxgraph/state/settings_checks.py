"""The rules a ``Settings`` instance must satisfy, one table per feature, checked in order.

Most rules name one setting and the values that work (``WholeNumber``, ``Number``,
``Choice``, ``Flag``, ``Names``, ``Text``); the few that relate settings to each other are
small named functions. ``check_settings`` runs the tables in ``RULES`` in order and raises
``SettingsError`` for the first rule broken, naming the setting and a value that would
work. A rule may first convert a value a LangGraph server sends as JSON (a list for a
tuple, a mapping for pairs) and store the converted value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol


class SettingsError(ValueError):
    """A setting has a value that cannot work; the message names it and what would."""


class Checked(Protocol):
    """What the cross-field rules read of the settings being checked (a ``Settings``)."""

    @property
    def summary_max_tokens(self) -> int:
        """Largest accepted summary, in tokens."""

    @property
    def trigger_tokens(self) -> int:
        """Request size that triggers compaction, in tokens."""

    @property
    def ledger_budget(self) -> int:
        """Tokens the rendered ledger may use."""

    @property
    def offload_tool_tokens(self) -> tuple[tuple[str, int], ...]:
        """Per-tool offload thresholds; a mapping or a JSON list until converted."""


Rule = Callable[[Checked], None]
"""Checks one thing of the settings; raises ``SettingsError`` when it does not hold."""


def _is_int(value: object) -> bool:
    """True for an int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """True for an int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(number: float) -> str:
    """``number`` as a message shows it: ``1`` for 1.0, ``0.85`` as is."""
    return str(int(number)) if float(number).is_integer() else repr(number)


def _store(settings: Checked, name: str, value: object) -> None:
    """Replace a (frozen) setting's value by its converted form."""
    object.__setattr__(settings, name, value)


def split_paths(raw: str) -> tuple[str, ...]:
    """Folder paths from a ``:``-separated list (as in ``PATH``); empty parts are dropped."""
    return tuple(part.strip() for part in raw.split(":") if part.strip())


# --- the kinds of rule --------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """A string with something other than whitespace in it."""

    name: str

    def __call__(self, settings: Checked) -> None:
        """Raise ``SettingsError`` unless the setting is a non-empty string."""
        value = getattr(settings, self.name)
        if not isinstance(value, str) or not value.strip():
            raise SettingsError(f"Settings.{self.name} must be a non-empty string, got {value!r}")


@dataclass(frozen=True)
class WholeNumber:
    """An int (not a bool) of at least ``minimum``; ``example`` is suggested in the message."""

    name: str
    minimum: int
    example: int
    relative_to: str | None = None
    """Another whole-number setting: the least value is then that setting + ``minimum``."""
    optional: bool = False
    """None is accepted too."""
    noun: str = "a whole number"
    unit: str = ""
    """What the number counts (``tokens``), shown after the minimum."""

    def __call__(self, settings: Checked) -> None:
        """Raise ``SettingsError`` unless the setting is a whole number of at least the least."""
        value = getattr(settings, self.name)
        if value is None and self.optional:
            return
        least = self.minimum
        if self.relative_to is not None:
            least += getattr(settings, self.relative_to)
        if not _is_int(value) or value < least:
            example = max(self.example, least)  # the suggestion must satisfy the rule itself
            unit = f" {self.unit}" if self.unit else ""
            none = " or None" if self.optional else ""
            raise SettingsError(
                f"Settings.{self.name} must be {self.noun} of at least {least}{unit} "
                f"(for example {example}){none}, got {value!r}"
            )


@dataclass(frozen=True)
class Number:
    """An int or float (not a bool) above or from ``low``, below or up to ``high``."""

    name: str
    low: float
    high: float | None = None
    low_open: bool = False
    """``low`` itself is excluded."""
    high_open: bool = False
    """``high`` itself is excluded."""
    unit: str = ""
    """What the number counts (``seconds``)."""
    example: float | None = None
    optional: bool = False
    """None is accepted too."""

    def __call__(self, settings: Checked) -> None:
        """Raise ``SettingsError`` unless the setting is a number within the bounds."""
        value = getattr(settings, self.name)
        if value is None and self.optional:
            return
        if not _is_number(value) or not self.holds(value):
            raise SettingsError(self.message(value))

    def holds(self, value: float) -> bool:
        """Whether ``value`` is within the bounds (NaN never is)."""
        above = value > self.low if self.low_open else value >= self.low
        if self.high is None:
            return above
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def bounds(self) -> str:
        """The bounds in words: ``in (0, 1]``, ``from 0.3 to 1``, ``0 or more``, ..."""
        low = _shown(self.low)
        if self.high is None:
            if self.low_open:
                return f"above {low}"
            return "0 or more" if self.low == 0 else f"at least {low}"
        high = _shown(self.high)
        if self.low_open and self.high_open:
            return f"between {low} and {high} (both excluded)"
        if self.low_open:
            return f"in ({low}, {high}]"
        return f"in [{low}, {high})" if self.high_open else f"from {low} to {high}"

    def message(self, value: object) -> str:
        """The error for ``value``: the setting, the bounds and an example."""
        kind = (
            f"a number of {self.unit}, {self.bounds()}"
            if self.unit
            else f"a number {self.bounds()}"
        )
        example = f", for example {_shown(self.example)}" if self.example is not None else ""
        none = ", or None" if self.optional else ""
        return f"Settings.{self.name} must be {kind}{example}{none}, got {value!r}"


@dataclass(frozen=True)
class Choice:
    """One of a few strings (the values of the field's ``Literal`` type)."""

    name: str
    choices: tuple[str, ...]

    def __call__(self, settings: Checked) -> None:
        """Raise ``SettingsError`` unless the setting is one of ``choices``."""
        value = getattr(settings, self.name)
        if value not in self.choices:
            quoted = [repr(choice) for choice in self.choices]
            listed = f"{', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
            raise SettingsError(f"Settings.{self.name} must be {listed}, got {value!r}")


@dataclass(frozen=True)
class Flag:
    """True or False (not 0 or 1)."""

    name: str

    def __call__(self, settings: Checked) -> None:
        """Raise ``SettingsError`` unless the setting is a bool."""
        value = getattr(settings, self.name)
        if not isinstance(value, bool):
            raise SettingsError(f"Settings.{self.name} must be True or False, got {value!r}")


@dataclass(frozen=True)
class Names:
    """A tuple of strings: tool names, skill names, folder paths."""

    name: str
    what: str
    """What the strings are, for the message (``tool names``)."""
    example: str | None = None
    """A value that works, as Python source (``('./skills',)``)."""
    non_empty: bool = False
    """Every string must have at least one character."""
    lists: bool = False
    """A list (as JSON gives) is accepted and stored as a tuple."""
    text: Callable[[str], tuple[str, ...]] | None = None
    """Splits one string into the tuple (as an environment variable gives it)."""

    def __call__(self, settings: Checked) -> None:
        """Convert a list or string as allowed, then raise unless the setting is a tuple."""
        value = self.converted(getattr(settings, self.name))
        _store(settings, self.name, value)
        if not isinstance(value, tuple) or not all(
            isinstance(item, str) and (item or not self.non_empty) for item in value
        ):
            example = f", for example {self.example}" if self.example else ""
            raise SettingsError(
                f"Settings.{self.name} must be a tuple of {self.what}{example}, got {value!r}"
            )

    def converted(self, value: object) -> object:
        """``value`` as a tuple when it is a list (``lists``) or a string (``text``)."""
        if isinstance(value, str) and self.text is not None:
            return self.text(value)
        if isinstance(value, list) and self.lists:
            return tuple(value)
        return value


# --- the rules that relate settings to each other -----------------------------------


def summary_fits_trigger(settings: Checked) -> None:
    """A summary must be smaller than the request size that triggers compaction."""
    if settings.summary_max_tokens >= settings.trigger_tokens:
        raise SettingsError(
            f"Settings.summary_max_tokens ({settings.summary_max_tokens}) must be below "
            f"trigger_tokens ({settings.trigger_tokens}), or a summary could never fit"
        )


def compacted_request_fits(settings: Checked) -> None:
    """A summary and the ledger together must stay below the compaction trigger."""
    summary, ledger, trigger = (
        settings.summary_max_tokens,
        settings.ledger_budget,
        settings.trigger_tokens,
    )
    if summary + ledger >= trigger:
        raise SettingsError(
            f"Settings.summary_max_tokens + ledger_max_tokens ({summary} + {ledger}) must stay "
            f"below trigger_tokens ({trigger}), or a compacted request could never fit"
        )


def tool_offload_thresholds(settings: Checked) -> None:
    """``offload_tool_tokens``: (tool name, tokens >= 0) pairs; a mapping or JSON list too.

    A mapping is stored as its pairs sorted by tool name, a list of lists as a tuple of
    tuples.
    """
    pairs: object = settings.offload_tool_tokens
    if isinstance(pairs, Mapping):
        pairs = tuple(sorted(pairs.items()))
        _store(settings, "offload_tool_tokens", pairs)
    elif isinstance(pairs, list):  # JSON pairs from a LangGraph server
        pairs = tuple(tuple(pair) if isinstance(pair, list) else pair for pair in pairs)
        _store(settings, "offload_tool_tokens", pairs)
    if not isinstance(pairs, tuple) or not all(_is_tool_threshold(pair) for pair in pairs):
        raise SettingsError(
            "Settings.offload_tool_tokens must map tool names to whole numbers of tokens "
            f"(0 or more), for example {{'read_file': 40000}}, got {pairs!r}"
        )


def _is_tool_threshold(pair: object) -> bool:
    """Whether ``pair`` is ``(tool name, whole number >= 0)``."""
    return (
        isinstance(pair, tuple)
        and len(pair) == 2
        and isinstance(pair[0], str)
        and _is_int(pair[1])
        and pair[1] >= 0
    )


# --- the rules, by feature ----------------------------------------------------------

REQUEST_RULES: tuple[Rule, ...] = (
    Text("system_prompt"),
    WholeNumber("context_window", 256, 128_000, optional=True, noun="an integer", unit="tokens"),
    Flag("cache_markers"),
    Choice("text_tool_calls", ("recover", "warn", "off")),
)
"""The main model's request and answer: system prompt, input window, cache markers, and
tool calls written as text."""

COMPACTION_RULES: tuple[Rule, ...] = (
    WholeNumber("keep_messages", 1, 8),
    WholeNumber("trigger_messages", 2, 60, relative_to="keep_messages"),
    WholeNumber("trigger_tokens", 500, 18_000),
    WholeNumber("summary_max_tokens", 100, 1_500),
    summary_fits_trigger,
    WholeNumber("summary_input_budget", 1_000, 12_000),
    WholeNumber("ledger_max_tool_calls", 1, 40),
    WholeNumber("ledger_max_identifiers", 1, 200),
    WholeNumber("ledger_max_tokens", 100, 1_000),
    Number("ledger_constraint_share", 0, 1, low_open=True, example=0.4),
    compacted_request_fits,
    Number("compaction_target", 0.3, 1, example=0.85),
    Choice("summary_fallback", ("record", "off")),
    Choice("summary_request", ("auto", "shared_prefix", "compact")),
    Number("trigger_fraction", 0, 1, low_open=True, example=0.8, optional=True),
)
"""Compaction: its triggers, what it keeps, the summary and the ledger."""

BACKGROUND_RULES: tuple[Rule, ...] = (
    Choice("compaction_mode", ("inline", "background")),
    Number("background_fraction", 0, 1, low_open=True, high_open=True, example=0.7),
    Number("background_wait_s", 0, unit="seconds", example=10),
    Number("compaction_lease_s", 1, unit="seconds", example=120),
)
"""Background compaction: when its job starts, how long a trigger waits, its lease."""

MEMORY_RULES: tuple[Rule, ...] = (
    Choice("memory_extraction", ("background", "inline", "deferred", "off")),
    Flag("extraction_gate"),
    Number("confidence_threshold", 0, 1, example=0.7),
    Number("memory_quiet_seconds", 0, unit="seconds", example=30),
    Number("memory_wait_s", 0, unit="seconds", example=120),
    Choice("memory_mode", ("auto", "tool", "off")),
    WholeNumber("memory_budget", 50, 2_000),
    WholeNumber("correction_budget", 1, 500),
    Number("memory_view_min_score", 0, 1, example=0.25),
    WholeNumber("memory_view_max_facts", 0, 12),
    Choice("memory_age_from", ("created", "confirmed")),
    WholeNumber("memory_search_max_tokens", 50, 900),
    Flag("memory_search_in_auto"),
)
"""Long-term memory: extraction, the injected view and the search tool."""

OFFLOAD_RULES: tuple[Rule, ...] = (
    WholeNumber("offload_tokens", 0, 20_000),
    tool_offload_thresholds,
    WholeNumber("offload_input_tokens", 0, 50_000),
    Number("offload_args_fraction", 0, 1, low_open=True, example=0.85),
    WholeNumber("offload_args_min_tokens", 1, 500),
    WholeNumber("artifact_quota_bytes", 1, 200_000_000),
    Names("read_only_tools", "tool names"),
)
"""Offloading tool results, user inputs and tool arguments to artifacts; read-only tools."""

SKILL_RULES: tuple[Rule, ...] = (
    Names(
        "skills_dirs",
        "folder paths",
        example="('./skills',)",
        non_empty=True,
        lists=True,
        text=split_paths,
    ),
    Names("skills_disabled", "skill names", example="('report-writer',)", lists=True),
    Flag("skills_from_store"),
    WholeNumber("max_active_skills", 1, 8),
    WholeNumber("skills_list_budget", 50, 2_000, optional=True),
    WholeNumber("skills_reinject_budget", 50, 2_000, optional=True),
    Choice("skill_policy", ("enforce", "advisory")),
)
"""Skills: where they come from, how many stay active, their token budgets, the policy."""

SUBAGENT_RULES: tuple[Rule, ...] = (
    WholeNumber("subagent_result_tokens", 100, 2_000),
    WholeNumber("subagent_max_parallel", 1, 3),
    WholeNumber("subagent_max_per_run", 1, 6),
    WholeNumber("subagent_max_steps", 4, 150),
    WholeNumber("subagent_max_depth", 1, 1),
    Number("subagent_timeout_s", 0, low_open=True, unit="seconds", example=1_800),
    Flag("subagent_general_purpose"),
)
"""Subagents: result size, how many run, how long and how deep."""

RULES: dict[str, tuple[Rule, ...]] = {
    "request": REQUEST_RULES,
    "compaction": COMPACTION_RULES,
    "background compaction": BACKGROUND_RULES,
    "memory": MEMORY_RULES,
    "offload": OFFLOAD_RULES,
    "skills": SKILL_RULES,
    "subagents": SUBAGENT_RULES,
}
"""Every rule by feature, in the order they are checked: a rule may rely on the earlier
ones (``trigger_messages`` on ``keep_messages``, the cross-field rules on the sizes)."""


def check_settings(settings: Checked) -> None:
    """Check every rule of ``RULES`` in order, converting JSON values on the way.

    Args:
        settings: The settings to check (a ``Settings`` being constructed).

    Raises:
        SettingsError: For the first rule broken, naming the setting and a value that works.

    """
    for rules in RULES.values():
        for rule in rules:
            rule(settings)
