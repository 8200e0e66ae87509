"""One assembly both hosts run: the part order, the seams' checks, the tools and the nodes.

The parts in their one order, the seams checked once, the tools, the token counter, the
request builder and the nodes (model, compact, memory loader and extraction, tool chain).

``create_builder`` wires an ``Assembly``'s nodes into a ``StateGraph``; the ``create_agent``
middleware host adapts LangChain's hooks to the same nodes. Nothing a feature does is
decided here: the parts decide it, and the nodes iterate over them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, get_type_hints

from langchain_core.tools import BaseTool
from typing_extensions import TypedDict

from ctxgraph.nodes.compaction.commit import ThreadHead
from ctxgraph.nodes.compaction.job_queue import JobQueue
from ctxgraph.nodes.compaction.node import CompactNode
from ctxgraph.nodes.memory.load import MemoryLoader
from ctxgraph.nodes.memory.node import MemoryNodes
from ctxgraph.nodes.model import ModelNode
from ctxgraph.nodes.part import Part, PartSetup
from ctxgraph.nodes.parts import CompactionPart, MemoryPart, OffloadPart, SkillsPart, SubagentsPart
from ctxgraph.nodes.request import RequestAssembler
from ctxgraph.nodes.skills.sources import has_sources
from ctxgraph.nodes.subagents.delegation import Delegation
from ctxgraph.nodes.tools.binding import UnboundToolGate
from ctxgraph.nodes.tools.wrappers import ToolWrapper
from ctxgraph.state.calibration import model_name
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.models import Models
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import MessageCount, TokenCounter

__all__ = [
    "BUILT_IN",
    "Assembly",
    "checked_counter",
    "checked_wrappers",
    "graph_state",
    "memory_loader",
    "ordered_parts",
    "part_of",
    "part_tools",
]

BUILT_IN: tuple[type[Part], ...] = (
    SubagentsPart,
    SkillsPart,
    CompactionPart,
    OffloadPart,
    MemoryPart,
)
"""The built-in kinds of part, in the order their tools are bound; a caller's follow."""

P = TypeVar("P", bound=Part)


def ordered_parts(
    parts: Sequence[Part] | None, settings: Settings, *, defaults: bool = True
) -> list[Part]:
    """One part of each built-in kind in ``BUILT_IN`` order, then the caller's own.

    With ``defaults`` (the graph) a kind ``parts`` lacks gets its default part (the
    skills part only when ``settings`` name skill sources); without (the middleware
    host) only the given parts are there.

    Raises:
        ValueError: ``parts`` holds two parts of one built-in kind.

    """
    found: dict[type[Part], Part] = {}
    extra: list[Part] = []
    for given in parts or ():
        kind = next((k for k in BUILT_IN if isinstance(given, k)), None)
        if kind is None:
            extra.append(given)
        elif kind in found:
            raise ValueError(f"parts holds two {kind.__name__}s; give one of each kind")
        else:
            found[kind] = given
    chosen: list[Part] = []
    for kind in BUILT_IN:
        part: Part | None = found.get(kind)
        if part is None and defaults and (kind is not SkillsPart or has_sources(settings)):
            part = kind()
        if part is not None:
            chosen.append(part)
    return [*chosen, *extra]


def part_of(parts: Sequence[Part], kind: type[P]) -> P | None:
    """The part of ``kind`` among ``parts``, if any."""
    return next((part for part in parts if isinstance(part, kind)), None)


def part_tools(parts: Sequence[Part], setup: PartSetup) -> list[BaseTool]:
    """The caller's tools (``setup.tools``) and then each part's; names are unique."""
    all_tools = [*setup.tools, *(tool for part in parts for tool in part.tools(setup))]
    names = [t.name for t in all_tools]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"tool names must be unique; {duplicates} appear more than once")
    return all_tools


def graph_state(parts: Sequence[Part]) -> type[Any]:
    """The thread state of a graph of ``parts``: ``messages``, the core keys, every part's.

    ``AgentState`` itself when no part adds a key of its own (the built-in kinds' states
    are always there, so a thread keeps them whichever parts a build has).

    Raises:
        ValueError: A part declares a key the graph already has with another type.

    """
    fields = get_type_hints(AgentState, include_extras=True)
    added: dict[str, Any] = {}
    states = [kind.state for kind in BUILT_IN] + [part.state for part in parts]
    for state in filter(None, states):
        for key, kind in get_type_hints(state, include_extras=True).items():
            known = fields.get(key, added.get(key))
            if known is not None and known != kind:
                raise ValueError(f"two parts declare the state key {key!r} with other types")
            if known is None:
                added[key] = kind
    if not added:
        return AgentState
    schema: type[Any] = TypedDict("AgentState", {**fields, **added})  # type: ignore[misc]
    return schema


def checked_counter(token_counter: MessageCount | None) -> TokenCounter:
    """The graph's one token counter, over ``token_counter`` when one is given.

    Raises:
        TypeError: ``token_counter`` is not callable.

    """
    if token_counter is not None and not callable(token_counter):
        raise TypeError(
            "token_counter must be a callable taking a list of messages and returning "
            f"their tokens (e.g. count_tokens_approximately), got {token_counter!r}"
        )
    return TokenCounter(count=token_counter)


def checked_wrappers(tool_wrappers: Sequence[ToolWrapper]) -> tuple[ToolWrapper, ...]:
    """``tool_wrappers`` as a tuple, each checked to have ``wrap`` and ``awrap``.

    Raises:
        TypeError: ``tool_wrappers`` is one wrapper, not a sequence, or one lacks a method.

    """
    if callable(getattr(tool_wrappers, "wrap", None)):
        raise TypeError(f"tool_wrappers takes a sequence, e.g. [{tool_wrappers!r}]")
    wrappers = tuple(tool_wrappers)
    for index, wrapper in enumerate(wrappers):
        missing = [name for name in ("wrap", "awrap") if not callable(getattr(wrapper, name, None))]
        if missing:
            raise TypeError(
                f"tool_wrappers[{index}] ({wrapper!r}) is not a ToolWrapper: it lacks "
                f"{' and '.join(missing)} (see ctxgraph.ToolWrapper)"
            )
    return wrappers


def memory_loader(
    parts: Sequence[Part], settings: Settings, counter: TokenCounter
) -> MemoryLoader | None:
    """The ``load_memory`` node's loader (it needs no model); None without memory loading."""
    memory = part_of(parts, MemoryPart)
    if memory is None or settings.memory_mode == "off":
        return None
    return MemoryLoader(settings, repositories=memory.repositories(settings), counter=counter)


class Assembly:
    """The tools, counter, prepared parts, request builder, wrappers and nodes of a build.

    ``parts`` are in their order already (``ordered_parts``); the caller's ``tools`` are
    bound first. ``compact`` is always there (memory's flush folds what it will fold);
    ``memory`` (the flush and extraction) needs a memory part and extraction on, and
    ``loader`` a memory part and memory loading on.
    """

    def __init__(
        self,
        models: Models,
        tools: Sequence[BaseTool],
        settings: Settings,
        parts: Sequence[Part],
        *,
        tool_wrappers: Sequence[ToolWrapper] = (),
        token_counter: MessageCount | None = None,
        head: ThreadHead | None = None,
        queue: JobQueue | None = None,
    ) -> None:
        """Check the seams and build every tool and node.

        Raises:
            PromptTemplateError: The summary prompt cannot be filled.
            TypeError: ``token_counter`` or a tool wrapper has the wrong shape.
            ValueError: Two tools share a name.

        """
        self.settings = settings
        self.counter = checked_counter(token_counter)
        """The one token counter: the requests, compaction, memory and offloading."""
        caller = tuple(tools)
        self.tools = part_tools(parts, PartSetup(models, settings, self.counter, caller, caller))
        self.setup = PartSetup(models, settings, self.counter, tuple(self.tools), caller)
        self.parts = [part.prepared(self.setup) for part in parts]
        self.state = graph_state(self.parts)
        """The thread state's schema."""
        self.requests = RequestAssembler(
            self.tools, self.counter, self.parts, model=model_name(models.main)
        )
        self.model = ModelNode(models.main, self.tools, settings, self.requests, self.parts)
        compaction = part_of(self.parts, CompactionPart)
        self.compact = CompactNode(
            models,
            self.requests,
            settings,
            self.counter,
            head=head,
            queue=queue,
            summary_prompt=compaction.summary_prompt if compaction else None,
        )
        memory = part_of(self.parts, MemoryPart)
        self.memory: MemoryNodes | None = None
        if memory is not None and settings.memory_extraction != "off":
            self.memory = MemoryNodes(
                models,
                self.compact.planner,
                settings,
                extraction_prompt=memory.extraction_prompt,
                repositories=memory.repositories(settings),
            )
        self.loader = memory_loader(self.parts, settings, self.counter)
        subagents = part_of(self.parts, SubagentsPart)
        self.delegation: Delegation | None = subagents.delegation if subagents else None
        self.wrappers = [
            *checked_wrappers(tool_wrappers),
            *(gate for part in self.parts for gate in part.gates(self.setup)),
            UnboundToolGate(settings, self.tools),
            *(wrapper for part in self.parts for wrapper in part.wrappers(self.setup)),
        ]
        """The wrappers around each tool call, the first outermost: the caller's, the
        parts' gates (the skill policy gate), the gate answering calls of gated tools not
        bound for the state, then the parts' wrappers (the result offloader), innermost."""
