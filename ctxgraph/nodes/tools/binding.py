"""Which tools a request binds: the caller's always, a gated tool once it can help.

Each gated tool carries its ``Gate`` (``ctxgraph.nodes.gates``): the reason it is not
bound for a state, whether the thread keeps it once bound, whether every tool filter
allows it. A kept unlock lives in ``state["tools_unlocked"]``, so a window that loses
what earned a tool does not unbind it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest

from ctxgraph.nodes.gates import Gate, ToolFilter, gate_of, persisted_unlocks
from ctxgraph.nodes.settings import settings_for
from ctxgraph.nodes.tools.wrappers import RefusalGate, error_result
from ctxgraph.state.settings import Settings
from ctxgraph.state.tool_unlocks import UNLOCKED_KEY


def allows_every_tool(policy: ToolFilter | None, settings: Settings) -> bool:
    """True if ``policy`` restricts no tool (None, allows everything, or advisory)."""
    return policy is None or policy.allowed is None or settings.skill_policy == "advisory"


def policy_allows(policy: ToolFilter | None, settings: Settings) -> Callable[[str], bool]:
    """Whether ``policy`` lets a tool be bound (everything when advisory or None)."""
    if policy is None or allows_every_tool(policy, settings):
        return lambda _name: True
    return policy.permits


class _Reasons:
    """The reasons of one state's gates, each asked at most once."""

    def __init__(self, state: Mapping[str, Any], settings: Settings) -> None:
        self._state = state
        self._settings = settings
        self._kept = persisted_unlocks(state)
        self._asked: dict[int, str | None] = {}

    def reason(self, name: str, gate: Gate) -> str | None:
        """Why ``name`` (behind ``gate``) is not bound; None when it is."""
        if gate.stays and name in self._kept:
            return None
        if gate.when is None:
            return None
        key = id(gate)
        if key not in self._asked:
            self._asked[key] = gate.when(self._state, self._settings)
        return self._asked[key]


class ToolBinding:
    """The tools of a graph in binding order, and which of them a state's request binds."""

    def __init__(self, tools: Sequence[BaseTool]) -> None:
        self._tools = tuple(tools)
        self._gates: dict[str, Gate] = {}
        for tool in self._tools:
            gate = gate_of(tool)
            if gate is not None and gate.when is not None:
                self._gates[tool.name] = gate
        # The names bound without a restricting policy, per set of hidden gated tools.
        self._unrestricted: dict[frozenset[str], frozenset[str]] = {}

    @property
    def tools(self) -> tuple[BaseTool, ...]:
        """Every tool, in binding order."""
        return self._tools

    def not_bound_reason(
        self, name: str, state: Mapping[str, Any], settings: Settings
    ) -> str | None:
        """Why the tool ``name`` is not bound for ``state``; None when it is (or not gated)."""
        gate = self._gates.get(name)
        return None if gate is None else _Reasons(state, settings).reason(name, gate)

    def hidden(self, state: Mapping[str, Any], settings: Settings) -> frozenset[str]:
        """The gated tools not bound for ``state`` under ``settings``."""
        if not self._gates:
            return frozenset()
        reasons = _Reasons(state, settings)
        return frozenset(
            name for name, gate in self._gates.items() if reasons.reason(name, gate) is not None
        )

    def names(
        self, state: Mapping[str, Any], settings: Settings, policy: ToolFilter | None = None
    ) -> frozenset[str]:
        """The names bound for ``state`` under ``settings``, within the tool filter ``policy``."""
        hidden = self.hidden(state, settings)
        if allows_every_tool(policy, settings):
            names = self._unrestricted.get(hidden)
            if names is None:
                names = frozenset(t.name for t in self._tools if t.name not in hidden)
                self._unrestricted[hidden] = names
            return names
        allowed = policy_allows(policy, settings)
        return frozenset(t.name for t in self._tools if t.name not in hidden and allowed(t.name))

    def unlocked(self, state: Mapping[str, Any], settings: Settings) -> frozenset[str]:
        """The tools that stay bound which ``state`` has unlocked: kept ones and earned ones."""
        reasons = _Reasons(state, settings)
        return frozenset(
            name
            for name, gate in self._gates.items()
            if gate.stays and reasons.reason(name, gate) is None
        )

    def unlock_update(self, state: Mapping[str, Any], settings: Settings) -> dict[str, list[str]]:
        """The ``tools_unlocked`` update keeping what ``state`` newly unlocked ({} if nothing)."""
        new = self.unlocked(state, settings) - persisted_unlocks(state)
        return {UNLOCKED_KEY: sorted(new)} if new else {}

    def always_bound(self) -> frozenset[str]:
        """The names bound whatever the state: every tool without a gate."""
        return frozenset(t.name for t in self._tools) - frozenset(self._gates)

    def unlock_sets(self) -> list[frozenset[str]]:
        """Every set a state can bind without a tool filter.

        The always-bound tools plus each combination of the gated groups present (the
        tools of one gate form a group).
        """
        groups: dict[int, set[str]] = {}
        for name, gate in self._gates.items():
            groups.setdefault(id(gate), set()).add(name)
        sets = [self.always_bound()]
        for group in groups.values():
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
    """A tool wrapper that answers a call of a gated tool not bound for the state.

    A model may call a tool it was not given (one it remembers, or one it guesses); such a
    call gets an error result naming why the tool is not available, and nothing runs.
    """

    def __init__(self, settings: Settings, tools: Sequence[BaseTool]) -> None:
        self._settings = settings
        self._binding = ToolBinding(tools)

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        name = request.tool_call["name"]
        state = request.state
        if not isinstance(state, Mapping):
            return None
        settings = settings_for(request.runtime.context, self._settings)
        reason = self._binding.not_bound_reason(name, state, settings)
        if reason is None:
            return None
        return error_result(
            request, name, f"Error: {name} is not available: {reason}. Do not call it."
        )
