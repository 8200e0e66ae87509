"""The size of a model request, the state it depends on, and the interface that measures it."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from langchain_core.messages import BaseMessage

from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.settings import Settings


@dataclass(frozen=True)
class RequestSize:
    """How big the next model request is."""

    tokens: int
    messages: int


def state_key(state: AgentState, settings: Settings) -> Hashable:
    """What a request depends on: window, summary mark, memory view, delegations, settings.

    The memory view's placement counts too: ``build`` places the view by it.
    """
    window: Sequence[BaseMessage] = state.get("messages") or []
    return (
        tuple((m.id, len(m.content)) for m in window),
        (state.get("compaction") or {}).get("checksum"),
        state.get("memory_view") or "",
        repr(state.get("memory_placement")),
        repr(state.get("delegations")),
        settings,
    )


class RequestMeasurer(Protocol):
    """Builds and measures the request the main model would receive for a state."""

    def build(self, state: AgentState, settings: Settings) -> list[BaseMessage]:
        """The messages the main model receives for ``state``."""
        ...

    def measure(self, request: Sequence[BaseMessage]) -> RequestSize:
        """Tokens (tool schemas included) and message count of a built request."""
        ...

    def measure_state(self, state: AgentState, settings: Settings) -> RequestSize:
        """Size of the request ``build(state, settings)`` makes."""
        ...
