"""How a built-in tool says when it is bound: a gate carried by the tool itself.

A part declares each of its tools as a ``GatedTool`` with a ``Gate``: when the tool is
bound (``when`` gives the reason it is not, None once it can help), whether a thread keeps
it bound once it was (``stays``, kept in ``state["tools_unlocked"]``), and whether every
skill policy allows it (``always_allowed``). Tool binding reads the gates off the tools,
so a new gated tool is declared where it is made and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import Field

from ctxgraph.state.settings import Settings
from ctxgraph.state.tool_unlocks import UNLOCKED_KEY

UnboundReason = Callable[[Mapping[str, Any], Settings], "str | None"]
"""Why a gated tool is not bound for a state under a run's settings; None when it is."""


@dataclass(frozen=True, eq=False)
class Gate:
    """When a tool is bound. Tools that share one gate are bound together.

    ``when`` None means always bound. ``stays``: once bound, the thread keeps the tool
    (``state["tools_unlocked"]``), so a compaction that folds what earned it does not
    unbind it. ``always_allowed``: every skill policy allows the tool (it only reads).
    """

    when: UnboundReason | None = None
    stays: bool = False
    always_allowed: bool = False


ALWAYS_BOUND_ALLOWED = Gate(always_allowed=True)
"""An ungated tool that every skill policy allows."""


class GatedTool(StructuredTool):
    """A ``StructuredTool`` that carries its ``Gate`` (not part of its schema)."""

    gate: Gate = Field(default=ALWAYS_BOUND_ALLOWED, exclude=True)


def gate_of(tool: BaseTool) -> Gate | None:
    """The gate ``tool`` carries; None for a tool without one (always bound)."""
    return tool.gate if isinstance(tool, GatedTool) else None


def always_allowed(tools: Iterable[BaseTool]) -> frozenset[str]:
    """The names of ``tools`` every skill policy allows."""
    return frozenset(t.name for t in tools if (gate := gate_of(t)) and gate.always_allowed)


def persisted_unlocks(state: Mapping[str, Any]) -> frozenset[str]:
    """The names ``state["tools_unlocked"]`` holds."""
    return frozenset(str(name) for name in state.get(UNLOCKED_KEY) or ())


class ToolFilter(Protocol):
    """Which tools a request may bind (a skill policy is one); ``allowed`` None is all."""

    @property
    def allowed(self) -> frozenset[str] | None:
        """The names allowed; None allows every tool."""
        ...

    def permits(self, tool_name: str) -> bool:
        """True if ``tool_name`` may be bound and run."""
        ...
