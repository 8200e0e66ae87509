"""The skills part: the skill tools, listing and context, the tool policy and ``/name``."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence

from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool
from langgraph.store.base import BaseStore

from ctxgraph.nodes.gates import always_allowed
from ctxgraph.nodes.part import BeforeModel, Part, PartSetup
from ctxgraph.nodes.skills.policy import SkillPolicyGate, ToolPolicy
from ctxgraph.nodes.skills.record import activation
from ctxgraph.nodes.skills.slash import first_call_of_turn, slash_command, unknown_skill_reply
from ctxgraph.nodes.skills.sources import SkillSources, has_sources
from ctxgraph.nodes.skills.tools import SkillTools
from ctxgraph.nodes.skills.view import NO_SKILLS, SkillParts, SkillRequests
from ctxgraph.nodes.tools.wrappers import ToolWrapper
from ctxgraph.state.graph_state import AgentState, SkillState
from ctxgraph.state.models import input_window
from ctxgraph.state.settings import Settings
from ctxgraph.store.skills import SkillSnapshot, unknown_tools

logger = logging.getLogger("ctxgraph.skills")


class SkillsPart(Part):
    """Skills as a part.

    It adds ``load_skill`` and ``read_skill_file``, appends the listing to the system
    prompt, puts the active skills' context in the stable part, restricts the bound tools
    to the active skills' policy and refuses the calls it does not allow. Before each call
    it reads the skill sources again (cheap when nothing changed), so a skill added,
    edited or removed between turns shows in the next request; a run whose user message
    starts with an unknown ``/name`` is answered without a model call.
    """

    rank = 30
    state = SkillState

    def __init__(
        self,
        sources: SkillSources | None = None,
        requests: SkillRequests | None = None,
        *,
        tool_names: Sequence[str] = (),
    ) -> None:
        """``requests`` and ``tool_names`` (every tool of the graph) are set when prepared."""
        self.sources = sources if sources is not None else SkillSources()
        self._requests = requests
        self._tool_names = tuple(tool_names)
        self._checked_digest = ""

    def tools(self, setup: PartSetup) -> Sequence[BaseTool]:
        """``load_skill`` and ``read_skill_file``, which every policy allows."""
        return SkillTools(self.sources, setup.settings).tools()

    def prepared(self, setup: PartSetup) -> SkillsPart:
        """The part for one graph: its skill requests know every tool of the graph."""
        main = setup.main
        names = [t.name for t in setup.tools]
        requests = SkillRequests(
            self.sources,
            names,
            lambda run: input_window(main, run.context_window),
            setup.counter.count_text,
            always_allowed(setup.tools),
        )
        return SkillsPart(self.sources, requests, tool_names=names)

    def gates(self, setup: PartSetup) -> Sequence[ToolWrapper]:
        """The policy gate, refusing the calls the active skills do not allow."""
        names = [t.name for t in setup.tools]
        return [SkillPolicyGate(self.sources, setup.settings, names, always_allowed(setup.tools))]

    def parts(self, state: AgentState, settings: Settings) -> SkillParts:
        """What skills add to the request for ``state``: listing, context and tool policy."""
        return NO_SKILLS if self._requests is None else self._requests.parts(state, settings)

    def tool_filter(self, state: AgentState, settings: Settings) -> ToolPolicy:
        """The active skills' tool policy."""
        return self.parts(state, settings).policy

    def system(self, state: AgentState, settings: Settings) -> str:
        """The skill listing."""
        return self.parts(state, settings).listing

    def stable(self, state: AgentState, settings: Settings) -> Sequence[BaseMessage]:
        """The active skills' context, when there is one."""
        context = self.parts(state, settings).context
        return () if context is None else [context]

    def request_key(self, state: AgentState, settings: Settings) -> Hashable:
        """Nothing beyond the listing and context, which the request key holds already."""
        return None

    def before_model(
        self, state: AgentState, settings: Settings, store: BaseStore | None
    ) -> BeforeModel:
        """Reads the sources again, then answers an unknown ``/name`` or records a known one."""
        return self._before(state, settings, self.sources.refresh(settings, store))

    async def abefore_model(
        self, state: AgentState, settings: Settings, store: BaseStore | None
    ) -> BeforeModel:
        """Async :meth:`before_model`."""
        return self._before(state, settings, await self.sources.arefresh(settings, store))

    def _before(
        self, state: AgentState, settings: Settings, snapshot: SkillSnapshot
    ) -> BeforeModel:
        """The answer to an unknown ``/name`` (no model call), or this call's extra update.

        A known ``/name`` is recorded in ``skill_context`` (``source="slash"``) at the first
        model call of its turn.
        """
        self._check_tools(snapshot)
        window = state.get("messages") or []
        command = slash_command(window) if has_sources(settings) else None
        if command is None:
            return BeforeModel()
        skill = snapshot.get(command.name)
        if skill is None:
            return BeforeModel(answer={"messages": [unknown_skill_reply(command.name, snapshot)]})
        if not first_call_of_turn(window):
            return BeforeModel()
        return BeforeModel(update={"skill_context": activation(skill, "slash", settings)})

    def _check_tools(self, snapshot: SkillSnapshot) -> None:
        """Log each ``allowed-tools`` name no bound tool has, once per reading of the skills."""
        if snapshot.digest == self._checked_digest:
            return
        self._checked_digest = snapshot.digest
        for problem in unknown_tools(snapshot, list(self._tool_names)):
            logger.warning("skill %s", problem)
