"""Runtime context of one run: who is talking, as which agent, in which project."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ctxgraph.state.settings import Settings, SettingsError

_LABEL = re.compile(r"[A-Za-z0-9_\-@:+]{1,128}")
"""An identity label or thread id, matched whole (``fullmatch``): a trailing newline fails."""

_RULE = "1-128 characters of letters, digits, '_', '-', '@', ':' or '+' (no dots or spaces)"

MISSING_USER_ID = (
    'Context.user_id is required: pass context={"user_id": "alice"} with the run '
    '(client.runs.create(thread_id, "ctxgraph", input=..., context={"user_id": "alice"})), '
    "or set it in Studio's assistant configuration (Manage Assistants, then the assistant's "
    'context: {"user_id": "alice"}); in Python, pass context=Context(user_id="alice") to '
    "invoke/stream"
)
"""Why a run without a user id is refused, and the exact ways to pass one."""


class ContextError(ValueError):
    """The runtime context is missing or holds an identity that cannot be used."""


def require_context(context: object) -> Context:
    """Return the run's ``Context``, or explain how to pass one."""
    if not isinstance(context, Context):
        raise ContextError(
            "this graph needs a runtime context with a user id: pass "
            "context=Context(user_id=...) to invoke/stream, or "
            + MISSING_USER_ID.removeprefix("Context.user_id is required: pass ")
            + f" (got {context!r})"
        )
    return context


AUTH_USER = "langgraph_auth_user"
AUTH_USER_ID = "langgraph_auth_user_id"
"""Keys a LangGraph server with custom auth puts in a run's ``configurable``."""


def check_auth_user(context: Context, config: Mapping[str, object] | None) -> Context:
    """Return ``context`` when it names the run's authenticated user, if there is one.

    On a LangGraph server with custom auth the authenticated identity is the user id: a
    context naming anyone else is refused. Without auth (no ``langgraph_auth_user`` in
    the config's ``configurable``) nothing is checked.
    """
    configurable = (config or {}).get("configurable")
    if not isinstance(configurable, Mapping) or configurable.get(AUTH_USER) is None:
        return context
    identity = configurable.get(AUTH_USER_ID)
    if isinstance(identity, str) and identity and identity != context.user_id:
        raise ContextError(
            f"Context.user_id {context.user_id!r} is not the authenticated user {identity!r}"
        )
    return context


def validate_label(name: str, value: object) -> str:
    """Check that an identity label can be used as a Store namespace part, and return it.

    The whole value must match: leading or trailing whitespace, a trailing newline or any
    other control character is refused.
    """
    if not isinstance(value, str) or not _LABEL.fullmatch(value):
        raise ContextError(f"{name} must be {_RULE}, got {value!r}")
    return value


def validate_thread_id(value: object, name: str = "thread id") -> str:
    """Check a thread id before anything is read or written for it, and return it.

    Thread ids follow the rule of user ids: 1-128 characters of letters, digits and
    ``_ - @ : +``. A thread id is a part of Store namespaces, which may not contain a
    period, and the rule keeps out ``/``, whitespace and control characters. Raises
    ``ContextError`` naming ``name``.
    """
    return validate_label(name, value)


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
        metadata={
            "description": "Per-run settings: only the fields given here override the "
            "graph's build-time settings, every other field keeps the graph's value (a "
            "Settings or a mapping of setting names to values)."
        },
    )

    def __post_init__(self) -> None:
        if not self.user_id:  # missing: "" from an empty assistant context, or None
            raise ContextError(MISSING_USER_ID)
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
