"""A request builder over the built-in parts, as a graph of no caller parts measures with."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.tools import BaseTool

from ctxgraph.graph.assembly import ordered_parts
from ctxgraph.nodes.parts import SkillsPart
from ctxgraph.nodes.request import RequestAssembler
from ctxgraph.nodes.skills.view import SkillRequests
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter


def request_builder(
    tools: Sequence[BaseTool],
    counter: TokenCounter,
    skills: SkillRequests | None = None,
    *,
    model: str | None = None,
) -> RequestAssembler:
    """The built-in parts' request assembler; ``skills`` gives the skill pieces."""
    given = [SkillsPart(requests=skills)] if skills is not None else []
    return RequestAssembler(tools, counter, ordered_parts(given, Settings()), model=model)
