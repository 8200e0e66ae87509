"""A part: one feature plugged into the graph, with its tools, wrappers, request pieces and hooks.

Tool binding, the request builder and the model node iterate over parts and name no
feature. Every method has a no-op default, so a part overrides only what it adds. A part
is given to the graph once; ``prepared`` returns the part one graph uses (a part that
keeps per-graph state returns a new object).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langchain_core.tools import BaseTool
from langgraph.store.base import BaseStore

from ctxgraph.nodes.gates import Gate, GatedTool, ToolFilter, gate_of
from ctxgraph.nodes.tools.wrappers import ToolWrapper
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter

if TYPE_CHECKING:
    from ctxgraph.state.models import Models

__all__ = [
    "BeforeModel",
    "Gate",
    "GatedTool",
    "Part",
    "PartSetup",
    "Placement",
    "ToolFilter",
    "TurnMessage",
    "gate_of",
]


@dataclass(frozen=True)
class PartSetup:
    """What a part is built into: the graph's models, settings, counter and tools.

    ``tools`` are the caller's tools when ``Part.tools`` is asked, and every tool of the
    graph (in binding order) when ``Part.prepared`` and ``Part.gates`` are.
    """

    models: Models | None
    settings: Settings
    counter: TokenCounter
    tools: tuple[BaseTool, ...] = ()
    caller_tools: tuple[BaseTool, ...] = ()
    """The caller's own tools, in every setup."""

    @property
    def main(self) -> BaseChatModel:
        """The main chat model."""
        if self.models is None:
            raise ValueError("this PartSetup lists tools only: it was given no models")
        return self.models.main


Placement = Mapping[str, Any]
"""What a part records on a request about its per-turn messages (where they went), handed
to its ``after_reply``; the part alone reads it."""


@dataclass(frozen=True)
class TurnMessage:
    """A per-turn data message and the index of the window message it goes before."""

    before: int
    message: BaseMessage


@dataclass(frozen=True)
class BeforeModel:
    """What a part does before a model call.

    ``answer``: the step's finished update, with no model call (e.g. an unknown
    ``/skill``). ``state``: replaces the state the request is built from. ``update``: added
    to the step's update. ``carry``: handed to the part's ``after_reply``.
    """

    answer: dict[str, Any] | None = None
    state: AgentState | None = None
    update: dict[str, Any] = field(default_factory=dict)
    carry: Any = None


NOTHING = BeforeModel()


class Part:
    """One feature of the graph. Every method has a no-op default.

    ``rank`` orders the parts' messages within the request (lower first): in the stable
    part after the window's leading system messages, and per turn where two parts place a
    message before the same window message.
    """

    rank: int = 50
    state: ClassVar[type[Any] | None] = None
    """The keys the part keeps in the thread: a TypedDict whose fields carry their
    reducers (``Annotated[list[str], merge]``), or None. The graph's state is ``messages``,
    the core keys and every part's state, so a caller's part keeps its own keys too."""

    def tools(self, setup: PartSetup) -> Sequence[BaseTool]:
        """The tools the part adds; a ``GatedTool`` says when it is bound."""
        return ()

    def prepared(self, setup: PartSetup) -> Part:
        """The part as one graph uses it, once every tool of the graph is known."""
        return self

    def gates(self, setup: PartSetup) -> Sequence[ToolWrapper]:
        """Wrappers that may refuse a call, outside the gate of unbound tools."""
        return ()

    def wrappers(self, setup: PartSetup) -> Sequence[ToolWrapper]:
        """Wrappers around each tool call, inside every gate, the first outermost."""
        return ()

    def tool_filter(self, state: AgentState, settings: Settings) -> ToolFilter | None:
        """Which tools a request for ``state`` may bind; None restricts nothing."""
        return None

    def system(self, state: AgentState, settings: Settings) -> str:
        """Text appended to the system prompt ("" for none)."""
        return ""

    def stable(self, state: AgentState, settings: Settings) -> Sequence[BaseMessage]:
        """Messages of the stable part of the request, after the leading system messages."""
        return ()

    def window(self, messages: Sequence[AnyMessage]) -> Sequence[AnyMessage]:
        """The working messages as they are sent (e.g. with unanswered tool calls answered)."""
        return messages

    def per_turn(self, state: AgentState, window: Sequence[BaseMessage]) -> Sequence[TurnMessage]:
        """Data messages placed within the window of the request."""
        return ()

    def placement(self, state: AgentState, window: Sequence[BaseMessage]) -> Placement | None:
        """Where the part's per-turn message went, recorded on the request (None: nowhere)."""
        return None

    def request_key(self, state: AgentState, settings: Settings) -> Hashable:
        """What the part's request pieces depend on beyond the state and settings."""
        return None

    def before_model(
        self, state: AgentState, settings: Settings, store: BaseStore | None
    ) -> BeforeModel:
        """Runs before each model call of a sync run."""
        return NOTHING

    async def abefore_model(
        self, state: AgentState, settings: Settings, store: BaseStore | None
    ) -> BeforeModel:
        """Runs before each model call of an async run; by default ``before_model``."""
        return self.before_model(state, settings, store)

    def after_reply(
        self, answer: AIMessage, placement: Placement | None, carry: Any
    ) -> Mapping[str, Any]:
        """The part's share of the model step's update for ``answer``.

        ``placement`` is the request's recorded placement, ``carry`` what the part's
        ``before_model`` handed on.
        """
        return {}
