"""Runtime context of one run: who is talking, as which agent, in which project."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ctxgraph.state.settings import Settings, SettingsError

_LABEL = re.compile(r"^[A-Za-z0-9_\-@:+]{1,128}$")


class ContextError(ValueError):
    """The runtime context is missing or holds an identity that cannot be used."""


def require_context(context: object) -> Context:
    """Return the run's ``Context``, or explain how to pass one."""
    if not isinstance(context, Context):
        raise ContextError(
            "this graph needs a runtime context with a user id: pass "
            "context=Context(user_id=...) to invoke/stream, or context={'user_id': ...} "
            f"to a LangGraph server run (got {context!r})"
        )
    return context


def validate_label(name: str, value: object) -> str:
    """Check that an identity label can be used as a Store namespace part, and return it."""
    if not isinstance(value, str) or not _LABEL.match(value):
        raise ContextError(
            f"{name} must be 1-128 characters of letters, digits, '_', '-', '@', ':' or '+' "
            f"(no dots or spaces), got {value!r}"
        )
    return value


@dataclass(kw_only=True)
class Context:
    """Identity and per-run settings, passed as ``context=`` to invoke/stream."""

    # A default lets a missing user_id reach the validation below and its clear message.
    user_id: str = field(
        default="", metadata={"description": "Whose thread and memory this run uses (required)."}
    )
    agent_name: str = field(
        default="default",
        metadata={"description": "Agent persona; user facts are kept per agent name."},
    )
    project_id: str | None = field(
        default=None, metadata={"description": "Project whose shared knowledge applies, if any."}
    )
    settings: Settings | None = field(
        default=None,
        metadata={"description": "Overrides the graph's build-time settings for this run."},
    )

    def __post_init__(self) -> None:
        validate_label("Context.user_id", self.user_id)
        validate_label("Context.agent_name", self.agent_name)
        if self.project_id is not None:
            validate_label("Context.project_id", self.project_id)
        raw = self.settings
        if isinstance(raw, Mapping):
            self.settings = Settings.from_mapping(raw)
        elif raw is not None and not isinstance(raw, Settings):
            raise SettingsError(
                f"Context.settings must be a Settings, a mapping of settings or None, got {raw!r}"
            )
