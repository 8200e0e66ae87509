"""The request builder of a graph with the built-in parts: what the nodes measure with."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.tools import BaseTool

from ctxgraph.nodes.part import Part
from ctxgraph.nodes.parts.compaction import CompactionPart
from ctxgraph.nodes.parts.memory import MemoryPart
from ctxgraph.nodes.parts.offload import OffloadPart
from ctxgraph.nodes.parts.skills import SkillsPart
from ctxgraph.nodes.parts.subagents import SubagentsPart
from ctxgraph.nodes.request import RequestAssembler
from ctxgraph.nodes.skills.view import SkillRequests
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter


def request_parts(skills: SkillRequests | None = None) -> list[Part]:
    """The built-in parts as far as a request goes; ``skills`` gives the skill pieces."""
    parts: list[Part] = [SubagentsPart()]
    if skills is not None:
        parts.append(SkillsPart(requests=skills))
    parts += [CompactionPart(), OffloadPart(), MemoryPart()]
    return parts


class RequestBuilder(RequestAssembler):
    """A ``RequestAssembler`` over the built-in parts (or ``parts``), with the summary size.

    Without ``parts`` it has the built-in request pieces: the summary, the memory view,
    the delegation record, and the skill pieces ``skills`` computes.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool],
        counter: TokenCounter,
        skills: SkillRequests | None = None,
        *,
        model: str | None = None,
        parts: Sequence[Part] | None = None,
    ) -> None:
        chosen = request_parts(skills) if parts is None else list(parts)
        super().__init__(tools, counter, chosen, model=model)
        compaction = [part for part in chosen if isinstance(part, CompactionPart)]
        self._compaction = compaction[0] if compaction else CompactionPart()

    def summary_tokens(self, state: AgentState, settings: Settings) -> int:
        """Tokens of the summary message a request for ``state`` carries (0 without one)."""
        return self._compaction.summary_tokens(state, settings, self.counter)
