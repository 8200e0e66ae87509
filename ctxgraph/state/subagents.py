"""``SubagentSpec``: a kind of child agent the main model can hand work to with ``task``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool

GENERAL_PURPOSE = "general-purpose"
"""The name of the subagent added unless ``Settings.subagent_general_purpose`` is False."""

GENERAL_PURPOSE_DESCRIPTION = (
    "A general helper with the same tools as you (except task). Use it for a "
    "self-contained piece of work whose exploration you do not need to see: searches, "
    "reading long material, multi-step look-ups. It returns a condensed answer."
)

GENERAL_PURPOSE_PROMPT = (
    "You are a subagent working on one delegated task. You see only the task, not the "
    "conversation it came from. Use your tools as needed, then answer with a complete, "
    "self-contained result: the findings, the identifiers and references the requester "
    "needs, and anything you could not establish. Your final message is all they receive."
)

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
"""A subagent name: lowercase letters, digits, ``-`` and ``_``, at most 64 characters."""


class SubagentSpecError(ValueError):
    """A subagent definition cannot work; the message names the spec and the field."""


@dataclass(frozen=True)
class SubagentSpec:
    """One subagent type: its name, when to use it, its rules, its tools and its model.

    ``tools`` are the child's own tools (the artifact readers are always added);
    ``model=None`` means the graph's main model.

    Args:
        name: What the main model passes as ``task``'s ``subagent_type``: lowercase
            letters, digits, ``-`` and ``_``, at most 64 characters (``researcher``).
        description: When to use this subagent, as the ``task`` tool lists it.
        system_prompt: The child's system rules.
        tools: The child's own LangChain tools; stored as a tuple.
        model: The child's chat model; None uses the graph's main model.

    Raises:
        SubagentSpecError: A ``ValueError``: the name does not match ``NAME_PATTERN``,
            the description or system prompt is empty, a tool is not a LangChain tool,
            or the model is not a chat model; the message names the spec and the field.

    """

    name: str
    description: str
    system_prompt: str
    tools: Sequence[BaseTool] = field(default=())
    model: BaseChatModel | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.match(self.name):
            raise SubagentSpecError(
                "SubagentSpec.name must be lowercase letters, digits, '-' or '_' "
                f"(at most 64, for example 'researcher'), got {self.name!r}"
            )
        for name in ("description", "system_prompt"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise SubagentSpecError(
                    f"SubagentSpec {self.name!r}: {name} must be a non-empty string, "
                    f"got {value!r:.80}"
                )
        tools: Any = self.tools
        if isinstance(tools, BaseTool) or not all(isinstance(t, BaseTool) for t in tools):
            raise SubagentSpecError(
                f"SubagentSpec {self.name!r}: tools must be a sequence of LangChain tools"
            )
        object.__setattr__(self, "tools", tuple(tools))
        if self.model is not None and not isinstance(self.model, BaseChatModel):
            raise SubagentSpecError(
                f"SubagentSpec {self.name!r}: model must be a chat model or None (the main "
                f"model), got {type(self.model).__name__}"
            )


def general_purpose(tools: Sequence[BaseTool]) -> SubagentSpec:
    """The general-purpose subagent, with ``tools`` (the caller's tools)."""
    return SubagentSpec(
        name=GENERAL_PURPOSE,
        description=GENERAL_PURPOSE_DESCRIPTION,
        system_prompt=GENERAL_PURPOSE_PROMPT,
        tools=tuple(tools),
    )
