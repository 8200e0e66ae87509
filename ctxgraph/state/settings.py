"""Tunable behaviour of a ctxgraph graph, validated in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any, Literal, Self

from ctxgraph.state.settings_checks import SettingsError, check_settings, split_paths
from ctxgraph.state.settings_env import ENVIRONMENT_SETTINGS, environment_values, parse_flag

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "ENVIRONMENT_SETTINGS",
    "Settings",
    "SettingsError",
    "parse_flag",
    "split_paths",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful assistant working inside a long-running session. "
    "Use the tools you are given when they help, and say plainly when you do not know."
)


_EXPLICIT = "_explicit_fields"
"""Instance attribute (not a field) holding the names given when the instance was built."""


@dataclass(kw_only=True, frozen=True)
class Settings:
    """Behaviour knobs shared by every node; validated on construction.

    Each instance remembers which fields were given when it was built
    (:attr:`explicit_fields`), so a run's settings can override only those fields of the
    graph's build-time settings (:meth:`merged_onto`). Equality, hashing and ``repr``
    compare the field values only.

    Args:
        **given: Any of the fields below, by name; each field's ``metadata`` describes it
            (``dataclasses.fields(Settings)``). A LangGraph server's JSON values are
            accepted too: lists for the tuples, a mapping for ``offload_tool_tokens``, a
            ``:``-separated string for ``skills_dirs``.

    Raises:
        SettingsError: A ``ValueError``: a field has a value that cannot work, alone or
            with the others (``summary_max_tokens`` must stay below ``trigger_tokens``,
            ...). The message names the setting and a value that would work; the rules
            are in ``state.settings_checks``.

    """

    system_prompt: str = field(
        default=DEFAULT_SYSTEM_PROMPT,
        metadata={"description": "System rules placed first in every main-model request."},
    )
    context_window: int | None = field(
        default=None,
        metadata={
            "description": "Input-window size of the main model in tokens, used when the "
            "provider does not report one (env CTXGRAPH_CONTEXT_WINDOW)."
        },
    )
    cache_markers: bool = field(
        default=False,
        metadata={
            "description": "Mark the end of the request's stable part with an Anthropic-style "
            "cache_control block when the main model accepts one; env CTXGRAPH_CACHE_MARKERS=1."
        },
    )
    text_tool_calls: Literal["recover", "warn", "off"] = field(
        default="recover",
        metadata={
            "description": "A main-model answer that writes tool calls as text (JSON, fenced "
            "or in <tool_call>/<tools> tags, as small models and chat templates without tool "
            "support do): turn it into real tool calls (recover), only log a warning naming "
            "the cause (warn), or leave it alone (off); env CTXGRAPH_TEXT_TOOL_CALLS. "
            "Recover is the default because it fires only when the WHOLE answer is calls of "
            "bound tools whose arguments validate against their schemas, so no prose can "
            "become a call; any other answer that looks like a call is kept with a warning."
        },
    )

    trigger_tokens: int = field(
        default=18_000,
        metadata={"description": "Compact when the whole next request reaches this many tokens."},
    )
    trigger_messages: int = field(
        default=60,
        metadata={"description": "Compact when the working window holds this many messages."},
    )
    trigger_fraction: float | None = field(
        default=None,
        metadata={
            "description": "Compact when the request reaches this fraction of the main model's "
            "input window (needs a known window); None turns this trigger off."
        },
    )
    keep_messages: int = field(
        default=8,
        metadata={"description": "Recent messages kept verbatim when compacting."},
    )
    compaction_target: float = field(
        default=0.6,
        metadata={
            "description": "After compacting, the request should use at most this fraction of "
            "each token trigger; fewer than keep_messages are kept when needed, so the next "
            "turns (a few large tool results, say) do not compact again at once."
        },
    )
    compaction_mode: Literal["inline", "background"] = field(
        default="inline",
        metadata={
            "description": "inline: the step that reaches a trigger writes the summary and "
            "waits for it. background: a job starts at background_fraction of a trigger and "
            "its result is applied at the trigger; env CTXGRAPH_COMPACTION_MODE."
        },
    )
    background_fraction: float = field(
        default=0.7,
        metadata={
            "description": "Background mode: start a summary job once the request reaches "
            "this fraction of any trigger (0 < f < 1)."
        },
    )
    background_wait_s: float = field(
        default=10.0,
        metadata={
            "description": "Background mode: seconds a trigger waits for a running job's "
            "result before it compacts inline (0 or more)."
        },
    )
    compaction_lease_s: float = field(
        default=120.0,
        metadata={
            "description": "Seconds a background job's per-thread lease lasts unless renewed; "
            "a job renews it every third of that, so a dead job's lease expires."
        },
    )
    summary_max_tokens: int = field(
        default=1_500,
        metadata={"description": "Largest accepted summary text (the four sections), in tokens."},
    )
    summary_fallback: Literal["record", "off"] = field(
        default="record",
        metadata={
            "description": "When no model writes a usable summary: 'record' commits a "
            "model-free record (the ledger and a digest of the folded turns, marked degraded) "
            "so the window stays bounded; 'off' skips the compaction and keeps every message."
        },
    )
    summary_request: Literal["auto", "shared_prefix", "compact"] = field(
        default="auto",
        metadata={
            "description": "How a summary call is sent. shared_prefix: the main model's own "
            "request for the state being compacted (same messages, same tool schemas) plus "
            "the summary instruction as the last message, so a provider's prompt cache "
            "serves the prefix; compact: a fresh, short prompt with a transcript of the "
            "folded messages. auto (default) is shared_prefix when the summary model is the "
            "main model, else compact; env CTXGRAPH_SUMMARY_REQUEST."
        },
    )
    summary_input_budget: int = field(
        default=12_000,
        metadata={
            "description": "Largest input to one summary call; more is summarized in chunks "
            "of whole tool exchanges."
        },
    )
    ledger_max_tool_calls: int = field(
        default=40,
        metadata={
            "description": "Tool-call entries the ledger keeps; older ones are folded into "
            "counts, read-only successes first, then read-only failures, side-effect "
            "successes, and side-effect failures or unknown outcomes last."
        },
    )
    ledger_max_identifiers: int = field(
        default=200,
        metadata={"description": "Exact identifiers the ledger keeps (the most recent win)."},
    )
    ledger_max_tokens: int = field(
        default=1_000,
        metadata={
            "description": "Budget of the ledger as rendered into a request (at most a sixth "
            "of trigger_tokens). Constraints come first, then non-success states, successes "
            "and identifiers, newest first while they fit; the rest are counted."
        },
    )
    ledger_constraint_share: float = field(
        default=0.4,
        metadata={
            "description": "Share of the ledger budget the user constraints may use in the "
            "record; beyond it, the constraints said longest ago are folded into the "
            "archive (counted in the record), and the one said last always stays."
        },
    )
    memory_extraction: Literal["background", "inline", "deferred", "off"] = field(
        default="background",
        metadata={
            "description": "Extract long-term memory after the turn in this process, without "
            "making the run wait (background: queued in the Store, then extracted at once by "
            "an in-process runner), in the run (inline), queued in the Store for a worker "
            "(deferred), or not at all (off); env CTXGRAPH_MEMORY_EXTRACTION."
        },
    )
    extraction_gate: bool = field(
        default=True,
        metadata={
            "description": "Skip the memory model for a turn whose filtered user text has no "
            "cue a fact could come from (a lexical check); env CTXGRAPH_EXTRACTION_GATE."
        },
    )
    confidence_threshold: float = field(
        default=0.7,
        metadata={"description": "Lowest confidence at which a fact candidate is stored."},
    )
    memory_quiet_seconds: float = field(
        default=30.0,
        metadata={
            "description": "Deferred extraction waits until a thread has been quiet this long "
            "(newest rows win, work is merged); background extraction does not wait; env "
            "CTXGRAPH_MEMORY_QUIET_SECONDS."
        },
    )
    memory_wait_s: float = field(
        default=120.0,
        metadata={
            "description": "Seconds the command line waits at exit for this process's "
            "background memory extractions; one still running stays queued for the next "
            "start (0 or more); env CTXGRAPH_MEMORY_WAIT_S."
        },
    )
    memory_mode: Literal["auto", "tool", "off"] = field(
        default="auto",
        metadata={
            "description": "How long-term memory comes back each turn: the profile and the "
            "most relevant facts within memory_budget (auto), the profile plus a "
            "memory_search tool (tool), or nothing (off); env CTXGRAPH_MEMORY_MODE."
        },
    )
    memory_budget: int = field(
        default=2_000,
        metadata={"description": "Tokens the injected memory view may use, headings included."},
    )
    correction_budget: int = field(
        default=500,
        metadata={
            "description": "Tokens of the memory view corrections may use; they are chosen "
            "before ordinary facts, and the whole view stays within memory_budget."
        },
    )
    memory_view_min_score: float = field(
        default=0.25,
        metadata={
            "description": "Floor, as a share of the best match's score, that a fact needs "
            "to enter the auto-mode memory view (corrections and preferences are always "
            "shown); 0 takes every candidate."
        },
    )
    memory_view_max_facts: int = field(
        default=12,
        metadata={
            "description": "Most facts besides corrections in the auto-mode memory view; "
            "0 sets no cap (memory_budget still applies)."
        },
    )
    memory_age_from: Literal["created", "confirmed"] = field(
        default="created",
        metadata={
            "description": "Age a fact for the search time decay from when it was first "
            "stored (created) or last confirmed by the user (confirmed), so a re-confirmed "
            "preference does not fade."
        },
    )
    memory_search_max_tokens: int = field(
        default=900,
        metadata={
            "description": "Largest memory_search result in tokens; the lowest-ranked "
            "results are dropped first."
        },
    )
    memory_search_in_auto: bool = field(
        default=False,
        metadata={
            "description": "Bind the memory_search tool in memory_mode auto too (it is "
            "always bound in tool mode); env CTXGRAPH_MEMORY_SEARCH_IN_AUTO=1."
        },
    )
    read_only_tools: tuple[str, ...] = field(
        default=(),
        metadata={
            "description": "Tool names to treat as read-only besides the name-prefix rule "
            "(get_, list_, search, lookup, ...)."
        },
    )
    offload_tokens: int = field(
        default=20_000,
        metadata={
            "description": "A tool result longer than this many tokens (or a quarter of the "
            "known input window, whichever is lower) is stored as a thread artifact and "
            "replaced by a short stub with its ref; 0 turns tool-result offloading off."
        },
    )
    offload_tool_tokens: tuple[tuple[str, int], ...] = field(
        default=(),
        metadata={
            "description": "Per-tool offload thresholds as (tool name, tokens) pairs (a "
            "mapping is accepted too); 0 never offloads that tool's results."
        },
    )
    offload_input_tokens: int = field(
        default=50_000,
        metadata={
            "description": "A user message longer than this many tokens (or half of the "
            "known input window; with the window unknown, half of trigger_tokens, whichever "
            "is lower) is stored as a thread artifact and replaced in the window by its "
            "head, tail and ref; 0 turns input offloading off."
        },
    )
    offload_args_fraction: float = field(
        default=0.85,
        metadata={
            "description": "When the next request reaches this fraction of the input window "
            "or of trigger_tokens, long string arguments of tool calls outside the kept "
            "window are stored as artifacts and replaced by a placeholder with the ref."
        },
    )
    offload_args_min_tokens: int = field(
        default=500,
        metadata={"description": "Shortest tool-call string argument that is offloaded."},
    )
    artifact_quota_bytes: int = field(
        default=200_000_000,
        metadata={
            "description": "Bytes of artifacts a thread may keep; beyond it the oldest "
            "artifacts that nothing in the window or the record refers to are evicted."
        },
    )

    skills_dirs: tuple[str, ...] = field(
        default=(),
        metadata={
            "description": "Folders of skill folders (each with a SKILL.md) listed to the "
            "model; env CTXGRAPH_SKILLS_DIRS, paths separated by ':'."
        },
    )
    skills_from_store: bool = field(
        default=False,
        metadata={
            "description": "Also read skills from the Store namespace ('skills',), one item per "
            "skill (for a LangGraph server); env CTXGRAPH_SKILLS_FROM_STORE=1."
        },
    )
    skills_disabled: tuple[str, ...] = field(
        default=(),
        metadata={"description": "Skill names that are neither listed nor loadable."},
    )
    max_active_skills: int = field(
        default=8,
        metadata={"description": "Active skills kept in state['skill_context'] (most recent)."},
    )
    skills_list_budget: int | None = field(
        default=None,
        metadata={
            "description": "Tokens the skill listing may use in every request; None means "
            "the smaller of 1% of the main model's input window and 2,000."
        },
    )
    skills_reinject_budget: int | None = field(
        default=None,
        metadata={
            "description": "Tokens of active skills' bodies re-attached once their load left "
            "the window; None means the smaller of 5% of the input window and 6,000."
        },
    )
    skill_policy: Literal["enforce", "advisory"] = field(
        default="enforce",
        metadata={
            "description": "'enforce' binds and runs only the tools the active skills allow; "
            "'advisory' logs a disallowed call and runs it."
        },
    )

    subagent_result_tokens: int = field(
        default=2_000,
        metadata={
            "description": "Tokens of a subagent's final text kept in the parent's task "
            "result; the full text and transcript stay readable by ref."
        },
    )
    subagent_max_parallel: int = field(
        default=3,
        metadata={
            "description": "task calls one model answer may run; each extra call gets an "
            "error result (capped, parallel_limit)."
        },
    )
    subagent_max_per_run: int = field(
        default=6,
        metadata={
            "description": "task calls one run may start; later calls get an error result "
            "(capped, run_limit)."
        },
    )
    subagent_timeout_s: float = field(
        default=1_800.0,
        metadata={"description": "Seconds a subagent may run before it is stopped (timed_out)."},
    )
    subagent_max_steps: int = field(
        default=150,
        metadata={
            "description": "A subagent's recursion limit; reaching it stops the child with "
            "its partial text (capped, step_limit)."
        },
    )
    subagent_max_depth: int = field(
        default=1,
        metadata={
            "description": "Levels of delegation: 1 means subagents get no task tool; 2 lets "
            "them delegate once more. Read when the graph is built."
        },
    )
    subagent_general_purpose: bool = field(
        default=True,
        metadata={
            "description": "Add the general-purpose subagent (the graph's tools, no task) "
            "when the graph has subagents. Read when the graph is built."
        },
    )

    def __new__(cls, **given: Any) -> Self:
        """Record the names of the given fields, then build as usual."""
        instance = super().__new__(cls)
        # Not a field: kept out of __eq__/__hash__/__repr__, but in __dict__, so copy,
        # deepcopy and pickle carry it along.
        object.__setattr__(instance, _EXPLICIT, frozenset(given))
        return instance

    def __post_init__(self) -> None:
        check_settings(self)  # the rules of state.settings_checks, feature by feature

    def skills_list_tokens(self, window: int | None) -> int:
        """Tokens the skill listing may use: the setting, else min(1% of ``window``, 2,000)."""
        if self.skills_list_budget is not None:
            return self.skills_list_budget
        return min(window // 100, 2_000) if window else 2_000

    def skills_reinject_tokens(self, window: int | None) -> int:
        """Tokens of re-attached skill bodies: the setting, else min(5% of ``window``, 6,000)."""
        if self.skills_reinject_budget is not None:
            return self.skills_reinject_budget
        return min(window * 5 // 100, 6_000) if window else 6_000

    @property
    def explicit_fields(self) -> frozenset[str]:
        """Names of the fields given when these settings were built.

        ``Settings(trigger_tokens=18_000)`` gives ``{"trigger_tokens"}`` even though that is
        the default; ``from_mapping`` and ``from_env`` give the names they were passed.
        ``dataclasses.replace`` passes every field, so its result names them all. An
        instance built without ``__init__`` (unpickled from before this record existed, or
        made by a validator that fills ``__dict__``) names the fields that differ from
        their defaults.
        """
        recorded = self.__dict__.get(_EXPLICIT)
        if isinstance(recorded, frozenset):
            return recorded
        return frozenset(
            f.name for f in fields(self) if getattr(self, f.name) != getattr(_defaults(), f.name)
        )

    def merged_onto(self, base: Settings) -> Settings:
        """``base`` with the fields given in these settings (:attr:`explicit_fields`) replaced.

        This is how a run's ``Context(settings=...)`` applies to the graph's build-time
        settings: every field these settings did not set keeps ``base``'s value. The result
        is validated as usual; an invalid combination raises ``SettingsError`` saying so and
        naming the fields. Results are cached, so calling this for every node is cheap.
        """
        return _merge(base, base.explicit_fields, self, self.explicit_fields)

    def offload_threshold(self, tool_name: str, window: int | None) -> int:
        """Tokens above which ``tool_name``'s result is offloaded; 0 means never.

        The per-tool override, else ``offload_tokens``; capped at a quarter of a known
        input ``window``.
        """
        limit = dict(self.offload_tool_tokens).get(tool_name, self.offload_tokens)
        if limit == 0:
            return 0
        return min(limit, window // 4) if window else limit

    @property
    def ledger_budget(self) -> int:
        """Tokens the rendered ledger may use: ledger_max_tokens, at most trigger_tokens / 6."""
        return min(self.ledger_max_tokens, self.trigger_tokens // 6)

    @property
    def constraint_budget(self) -> int:
        """Tokens the record's constraint lines may use: ledger_constraint_share of the ledger."""
        return int(self.ledger_budget * self.ledger_constraint_share)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Settings:
        """Build settings from a plain mapping (as a LangGraph server sends them).

        Args:
            values: Setting names to values; JSON values are accepted (see ``Settings``).

        Returns:
            The settings, with the names of ``values`` as their explicit fields.

        Raises:
            SettingsError: A name is not a setting, or a value cannot work.

        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise SettingsError(f"unknown setting(s) {unknown}; known settings are {sorted(known)}")
        return cls(**dict(values))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Read the settings that have environment variables (pass ``os.environ``).

        Args:
            environ: The environment; the variables are those of ``ENVIRONMENT_SETTINGS``,
                and an unset or blank one leaves its setting at the default.

        Returns:
            The settings, with the variables' settings as their explicit fields.

        Raises:
            SettingsError: A variable's text is not of its setting's type, or its value
                cannot work; the message names the variable or the setting.

        """
        return cls(**environment_values(environ))


@lru_cache(maxsize=1)
def _field_names() -> frozenset[str]:
    return frozenset(f.name for f in fields(Settings))


@lru_cache(maxsize=1)
def _defaults() -> Settings:
    return Settings()


def _with_explicit(settings: Settings, explicit: frozenset[str]) -> Settings:
    object.__setattr__(settings, _EXPLICIT, explicit)
    return settings


@lru_cache(maxsize=256)
def _merge(
    base: Settings,
    base_explicit: frozenset[str],
    override: Settings,
    override_explicit: frozenset[str],
) -> Settings:
    """``override``'s given fields over ``base``; the explicit sets are part of the cache key.

    Equal settings with different explicit fields are equal (and hash alike) as keys, so
    the explicit sets are passed separately to keep their merges apart.
    """
    if not override_explicit:
        return base
    values = {
        name: getattr(override if name in override_explicit else base, name)
        for name in sorted(_field_names())
    }
    try:
        merged = Settings(**values)
    except SettingsError as error:
        given = ", ".join(sorted(override_explicit))
        raise SettingsError(
            f"the run's settings (Context.settings, which sets {given}) combined with the "
            f"graph's build-time settings are invalid: {error}"
        ) from error
    return _with_explicit(merged, base_explicit | override_explicit)
