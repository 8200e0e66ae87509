"""The tool policy of the active skills: which tools a request binds and a call may run."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest

from ctxgraph.nodes.settings import settings_for
from ctxgraph.nodes.skills.slash import slash_command
from ctxgraph.nodes.skills.sources import SkillSources
from ctxgraph.nodes.tools.wrappers import RefusalGate, error_result
from ctxgraph.state.settings import Settings
from ctxgraph.store.skills import Skill, SkillSnapshot

logger = logging.getLogger("ctxgraph.skills")

ALWAYS_ALLOWED = frozenset(
    {
        "load_skill",
        "read_skill_file",
        "read_history",
        "memory_search",
        "read_artifact",
        "grep_artifact",
    }
)
"""The built-in tools every policy allows (they only read skills, history, memory and
artifacts): the default of ``exempt``; a graph passes the names its tools' gates allow."""


@dataclass(frozen=True)
class ToolPolicy:
    """Which tools may run: ``allowed`` None means every tool."""

    allowed: frozenset[str] | None
    reason: str
    """Where the set comes from, as the model and the logs are told."""

    def permits(self, tool_name: str) -> bool:
        """True if ``tool_name`` may be bound and run."""
        return self.allowed is None or tool_name in self.allowed

    def describe(self, tool_names: Collection[str]) -> str:
        """One line naming the allowed tools among ``tool_names``, for the request and errors."""
        if self.allowed is None:
            return "every tool is allowed"
        names = sorted(name for name in tool_names if name in self.allowed)
        return f"only {', '.join(names) or 'no tools'} may be called ({self.reason})"


UNRESTRICTED = ToolPolicy(None, "no active skill declares allowed-tools")


def tool_policy(
    entries: Sequence[Mapping[str, Any]],
    slash: Skill | None,
    snapshot: SkillSnapshot,
    exempt: frozenset[str] = ALWAYS_ALLOWED,
) -> ToolPolicy:
    """The policy for a request, from the active skills and the run's slash skill.

    A skill activated with ``/name`` in this run decides alone; otherwise the union of the
    ``allowed-tools`` of the active skills that declare it, and no restriction when none
    does. The always-allowed tools (``exempt``) join any restricted set. When a configured
    skill source cannot be read, only the always-allowed tools remain (fail closed).
    """
    if not snapshot.readable:
        return ToolPolicy(exempt, "the skill registry could not be read")
    if slash is not None:
        if slash.allowed_tools is None:
            return ToolPolicy(None, f"/{slash.name} declares no allowed-tools")
        return ToolPolicy(
            frozenset(slash.allowed_tools) | exempt,
            f"allowed-tools of /{slash.name}, activated for this turn",
        )
    declared = [
        (str(entry["name"]), entry["allowed_tools"])
        for entry in entries
        if entry.get("allowed_tools") is not None
    ]
    if not declared:
        return UNRESTRICTED
    allowed = frozenset(name for _, names in declared for name in names) | exempt
    sources = ", ".join(sorted({skill for skill, _ in declared}))
    return ToolPolicy(allowed, f"the union of allowed-tools of the active skills {sources}")


def slash_skill(window: Sequence[BaseMessage], snapshot: SkillSnapshot) -> Skill | None:
    """The skill the run's ``/name`` activates, if it names a known skill."""
    command = slash_command(window)
    return None if command is None else snapshot.get(command.name)


def policy_for_state(
    state: Mapping[str, Any], snapshot: SkillSnapshot, exempt: frozenset[str] = ALWAYS_ALLOWED
) -> ToolPolicy:
    """The policy of a graph state: its ``skill_context`` and its latest user message."""
    window: Sequence[BaseMessage] = state.get("messages") or []
    entries = state.get("skill_context") or []
    return tool_policy(entries, slash_skill(window, snapshot), snapshot, exempt)


def refusal(request: ToolCallRequest, policy: ToolPolicy, tool_names: Collection[str]) -> str:
    """The error a refused call returns to the model."""
    name = request.tool_call["name"]
    return (
        f"Tool {name!r} is not allowed by the skill tool policy: "
        f"{policy.describe(tool_names)}. Use an allowed tool, or load a skill that allows "
        f"{name!r}."
    )


class SkillPolicyGate(RefusalGate):
    """A tool wrapper that refuses calls the active skills' policy does not allow.

    With ``Settings.skill_policy == "advisory"`` a disallowed call is logged and runs.
    """

    def __init__(
        self,
        sources: SkillSources,
        settings: Settings,
        tool_names: Collection[str],
        exempt: frozenset[str] = ALWAYS_ALLOWED,
    ) -> None:
        self._sources = sources
        self._settings = settings
        self._tool_names = frozenset(tool_names)
        self._exempt = exempt

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        state = request.state
        if not isinstance(state, Mapping):
            return None
        settings = settings_for(request.runtime.context, self._settings)
        policy = policy_for_state(state, self._sources.current(settings), self._exempt)
        name = request.tool_call["name"]
        if policy.permits(name):
            return None
        text = refusal(request, policy, self._tool_names)
        if settings.skill_policy == "advisory":
            logger.warning("skill policy (advisory): %s; running it anyway", text)
            return None
        logger.info("skill policy refused %r: %s", name, policy.reason)
        return error_result(request, name, text)
