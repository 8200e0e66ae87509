"""The ``skill_context`` update that marks a skill active."""

from __future__ import annotations

from datetime import UTC, datetime

from ctxgraph.state.settings import Settings
from ctxgraph.state.skill_context import SkillActivation, SkillContextEntry, SkillContextUpdate
from ctxgraph.store.skills import Skill


def activation(
    skill: Skill, source: SkillActivation, settings: Settings, tool_call_id: str | None = None
) -> SkillContextUpdate:
    """The update recording ``skill`` as active now (kept to ``max_active_skills``)."""
    entry = SkillContextEntry(
        name=skill.name,
        path=skill.path,
        description=skill.description,
        sha256=skill.sha256,
        loaded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        source=source,
        allowed_tools=None if skill.allowed_tools is None else list(skill.allowed_tools),
    )
    if tool_call_id is not None:
        entry["tool_call_id"] = tool_call_id
    return SkillContextUpdate(entries=[entry], max_active=settings.max_active_skills)
