"""Slash activation: a user message that starts with ``/name`` names a skill for the run."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage

from ctxgraph.state.messages import ORIGIN_KEY, content_text, is_real_user_message
from ctxgraph.store.skills import SkillSnapshot

RESERVED_COMMANDS = frozenset({"help", "new", "status", "compact", "memory"})
"""Slash words that never name a skill (front ends use them for their own commands)."""

SKILLS_ORIGIN = "skills"
"""The origin mark of messages the skills machinery writes (never memory evidence)."""

_SLASH = re.compile(r"/([a-z0-9]+(?:-[a-z0-9]+)*)(?=\s|$)")

UNKNOWN_SKILL_REPLY = "There is no skill called /{name}.{suggestions}"
"""The whole answer to an unknown ``/name``; no model is called for it."""


@dataclass(frozen=True)
class SlashCommand:
    """A ``/name`` at the start of the latest real user message."""

    name: str
    rest: str
    """The text after the command (the user's request for the skill)."""


def parse_slash(text: str) -> SlashCommand | None:
    """The command ``text`` starts with, or None (reserved words and paths are not commands).

    ``/name`` must be followed by whitespace or the end of the text, so ``/usr/bin`` or
    ``/Name`` is ordinary text; the name follows the skill-name rules (at most 64
    characters).
    """
    stripped = text.lstrip()
    match = _SLASH.match(stripped)
    if match is None or len(match.group(1)) > 64 or match.group(1) in RESERVED_COMMANDS:
        return None
    return SlashCommand(match.group(1), stripped[match.end() :].strip())


def latest_user_message(window: Sequence[BaseMessage]) -> int | None:
    """Index of the latest real user message of ``window``, or None."""
    for index in range(len(window) - 1, -1, -1):
        if is_real_user_message(window[index]):
            return index
    return None


def slash_command(window: Sequence[BaseMessage]) -> SlashCommand | None:
    """The command of the run: the latest real user message's, if it starts with one."""
    index = latest_user_message(window)
    return None if index is None else parse_slash(content_text(window[index]))


def first_call_of_turn(window: Sequence[BaseMessage]) -> bool:
    """True when nothing has answered the latest real user message yet."""
    index = latest_user_message(window)
    return index is not None and index == len(window) - 1


def unknown_skill_reply(name: str, snapshot: SkillSnapshot) -> AIMessage:
    """The one assistant message that answers an unknown or disabled ``/name``."""
    close = snapshot.close_matches(name)
    if close:
        listed = ", ".join(f"/{match}" for match in close)
        suggestions = f" Did you mean {listed}?"
    elif snapshot.names:
        shown = ", ".join(f"/{each}" for each in snapshot.names[:10])
        more = f" and {len(snapshot.names) - 10} more" if len(snapshot.names) > 10 else ""
        suggestions = f" Available skills: {shown}{more}."
    else:
        suggestions = " No skills are available."
    return AIMessage(
        content=UNKNOWN_SKILL_REPLY.format(name=name, suggestions=suggestions),
        additional_kwargs={ORIGIN_KEY: SKILLS_ORIGIN},
    )
