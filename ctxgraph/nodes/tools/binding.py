"""Which tools a request binds: the caller's always, the built-in readers once they can help.

``read_artifact`` and ``grep_artifact`` are bound once the thread has an artifact (an
offload stub or a subagent's refs in the window, an artifact in the record's ledger or the
delegation record), ``read_history`` once it has an archive (a committed compaction), and
``memory_search`` in memory mode ``tool`` (or ``auto`` with
``Settings.memory_search_in_auto``). An unlock is kept in ``state["tools_unlocked"]``, so a
compaction that folds the stub does not unbind a tool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest

from ctxgraph.nodes.offload.unlocks import (
    ARTIFACT_TOOLS,
    GATED,
    HISTORY_TOOL,
    MEMORY_TOOL,
    UNLOCKABLE,
    unlocked_tools,
)
from ctxgraph.nodes.settings import settings_for
from ctxgraph.nodes.tools.wrappers import RefusalGate, error_result
from ctxgraph.state.settings import Settings

if TYPE_CHECKING:
    from ctxgraph.nodes.skills.policy import ToolPolicy


def memory_search_bound(settings: Settings) -> bool:
    """True if the run's settings bind ``memory_search``."""
    mode = settings.memory_mode
    return mode == "tool" or (mode == "auto" and settings.memory_search_in_auto)


def not_bound_reason(name: str, state: Mapping[str, Any], settings: Settings) -> str | None:
    """Why the built-in tool ``name`` is not bound for ``state``; None when it is (or not gated)."""
    if name in ARTIFACT_TOOLS and name not in unlocked_tools(state):
        return "this thread has no offloaded content yet, so there is no artifact to read"
    if name == HISTORY_TOOL and name not in unlocked_tools(state):
        return "nothing in this thread has been compacted yet, so there is no archive to read"
    if name == MEMORY_TOOL and not memory_search_bound(settings):
        if settings.memory_mode == "off":
            return "long-term memory is off in this run"
        return "in memory mode auto, what is remembered comes with the request already"
    return None


def allows_every_tool(policy: ToolPolicy | None, settings: Settings) -> bool:
    """True if the skill ``policy`` restricts no tool (None, no ``allowed-tools``, advisory)."""
    return policy is None or policy.allowed is None or settings.skill_policy == "advisory"


def policy_allows(policy: ToolPolicy | None, settings: Settings) -> Callable[[str], bool]:
    """Whether the skill ``policy`` lets a tool be bound (everything when advisory or None)."""
    if policy is None or allows_every_tool(policy, settings):
        return lambda _name: True
    return policy.permits


class ToolBinding:
    """The tools of a graph in binding order, and which of them a state's request binds."""

    def __init__(self, tools: Sequence[BaseTool]) -> None:
        self._tools = tuple(tools)
        self._gated = frozenset(t.name for t in self._tools) & GATED
        # The names bound without a restricting policy, per set of hidden gated tools.
        self._unrestricted: dict[frozenset[str], frozenset[str]] = {}

    @property
    def tools(self) -> tuple[BaseTool, ...]:
        """Every tool, in binding order."""
        return self._tools

    def names(
        self, state: Mapping[str, Any], settings: Settings, policy: ToolPolicy | None = None
    ) -> frozenset[str]:
        """The names bound for ``state`` under ``settings``, within the skill ``policy``."""
        hidden: frozenset[str] = frozenset()
        if self._gated:
            unlockable = self._gated & UNLOCKABLE
            hidden = unlockable - unlocked_tools(state) if unlockable else hidden
            if MEMORY_TOOL in self._gated and not memory_search_bound(settings):
                hidden |= {MEMORY_TOOL}
        if allows_every_tool(policy, settings):
            names = self._unrestricted.get(hidden)
            if names is None:
                names = frozenset(t.name for t in self._tools if t.name not in hidden)
                self._unrestricted[hidden] = names
            return names
        allowed = policy_allows(policy, settings)
        return frozenset(t.name for t in self._tools if t.name not in hidden and allowed(t.name))

    def always_bound(self) -> frozenset[str]:
        """The names bound whatever the state: every tool that is not a gated built-in."""
        return frozenset(t.name for t in self._tools) - self._gated

    def unlock_sets(self) -> list[frozenset[str]]:
        """Every set a state can bind without a skill policy.

        The caller's tools plus each combination of the gated groups present (the two
        readers, ``read_history``, ``memory_search``).
        """
        groups = [g & self._gated for g in (ARTIFACT_TOOLS, {HISTORY_TOOL}, {MEMORY_TOOL})]
        sets = [self.always_bound()]
        for group in (g for g in groups if g):
            sets += [names | group for names in sets]
        return sets

    def select(self, names: frozenset[str]) -> list[BaseTool]:
        """The tools named in ``names``, in binding order."""
        return [t for t in self._tools if t.name in names]


class ToolTokens:
    """Tokens of the schemas of each distinct bound set, each counted once."""

    def __init__(self, binding: ToolBinding, count: Callable[[list[BaseTool]], int]) -> None:
        self._binding = binding
        self._count = count
        self._cache: dict[frozenset[str], int] = {}
        self._lock = threading.Lock()

    def warm(self, sets: Iterable[frozenset[str]]) -> None:
        """Count ``sets`` now (at build time), so a run counts none of them.

        Counting the first schemas loads the tokenizer, a blocking read an event loop
        must not make.
        """
        for names in sets:
            self(names)

    def __call__(self, names: frozenset[str]) -> int:
        """Tokens of the schemas of the tools ``names`` binds."""
        with self._lock:
            cached = self._cache.get(names)
        if cached is not None:
            return cached
        counted = self._count(self._binding.select(names))
        with self._lock:
            self._cache[names] = counted
        return counted


class UnboundToolGate(RefusalGate):
    """A tool wrapper that answers a call of a gated built-in not bound for the state.

    A model may call a tool it was not given (one it remembers, or one it guesses); such a
    call gets an error result naming why the tool is not available, and nothing runs.
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        name = request.tool_call["name"]
        state = request.state
        if name not in GATED or not isinstance(state, Mapping):
            return None
        settings = settings_for(request.runtime.context, self._settings)
        reason = not_bound_reason(name, state, settings)
        if reason is None:
            return None
        return error_result(
            request, name, f"Error: {name} is not available: {reason}. Do not call it."
        )
