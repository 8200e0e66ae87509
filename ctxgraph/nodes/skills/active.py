"""What each request carries about the active skills: reminders, bodies and the slash skill."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from ctxgraph.nodes.skills.policy import ToolPolicy
from ctxgraph.store.skills import Skill, SkillSnapshot

REMINDER_HEADER = (
    "Active skills of this thread (a record kept by the application, not a message from "
    "the user). Their instructions still apply; load_skill(name) shows a skill in full."
)
CHANGED = "changed since loaded, reload it with load_skill({name!r})"
GONE = "no longer available"
POLICY_LINE = "Tool policy: {policy}."
REATTACHED_HEADER = (
    "Instructions of the active skill {name} (sha256 {short}), re-attached because its "
    "load_skill result is no longer in the conversation:"
)
CUT_MARKER = "[cut here: call load_skill({name!r}) again for the full text]"
SLASH_HEADER = (
    "The user activated the skill {name} with /{name} for this turn. Follow its "
    "instructions (ref {path}, sha256 {short}):"
)
MIN_BODY_TOKENS = 40
"""A re-attached body gets at least this much room, or it is left out."""

SHORT_HASH = 12


def _short(sha256: str) -> str:
    return sha256[:SHORT_HASH]


def _reminder(entry: Mapping[str, Any], snapshot: SkillSnapshot) -> str:
    name = str(entry.get("name", ""))
    line = f"- {name}: ref {entry.get('path', '')}, sha256 {_short(str(entry.get('sha256', '')))}"
    if entry.get("source") == "slash":
        line += ", activated with /" + name
    current = snapshot.get(name)
    if current is None or current.path != entry.get("path"):
        line += f"; {GONE}"
    elif current.sha256 != entry.get("sha256"):
        line += "; " + CHANGED.format(name=name)
    return line


def render_reminders(
    entries: Sequence[Mapping[str, Any]],
    snapshot: SkillSnapshot,
    policy: ToolPolicy,
    tool_names: Sequence[str],
) -> str:
    """One line per active skill (name, ref, hash; stale ones say so) and the tool policy."""
    lines = [REMINDER_HEADER, *(_reminder(entry, snapshot) for entry in entries)]
    lines.append(POLICY_LINE.format(policy=policy.describe(tool_names)))
    return "\n".join(lines)


def loads_in_window(window: Sequence[BaseMessage]) -> set[str]:
    """Tool-call ids of ``load_skill`` results still readable in ``window`` (not offloaded)."""
    return {
        message.tool_call_id
        for message in window
        if isinstance(message, ToolMessage)
        and message.name == "load_skill"
        and message.status != "error"
        and "offload" not in message.additional_kwargs
    }


def bodies_to_reattach(
    entries: Sequence[Mapping[str, Any]],
    window: Sequence[BaseMessage],
    snapshot: SkillSnapshot,
    slash: Skill | None,
) -> list[Skill]:
    """Active skills whose instructions the request would otherwise lack, newest first.

    A skill qualifies when its ``load_skill`` result left the window (folded or offloaded)
    or it was activated with ``/name`` in an earlier turn, and it still exists unchanged.
    The run's own slash skill is attached whole elsewhere.
    """
    present = loads_in_window(window)
    chosen: list[Skill] = []
    for entry in reversed(entries):
        if entry.get("tool_call_id") in present:
            continue
        skill = snapshot.get(str(entry.get("name", "")))
        if skill is None or skill.path != entry.get("path") or skill.sha256 != entry.get("sha256"):
            continue
        if slash is not None and skill.path == slash.path:
            continue
        chosen.append(skill)
    return chosen


def cut_to_tokens(text: str, budget: int, count: Callable[[str], int]) -> tuple[str, bool]:
    """The longest prefix of ``text`` (at a line end where possible) within ``budget`` tokens."""
    if count(text) <= budget:
        return text, False
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if count(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    prefix = text[:low]
    newline = prefix.rfind("\n")
    if newline > low // 2:
        prefix = prefix[:newline]
    return prefix.rstrip(), True


def render_reattached(
    skills: Sequence[Skill], budget: int, count: Callable[[str], int]
) -> list[str]:
    """The bodies of ``skills`` (newest first) within ``budget`` tokens, each cut to fit.

    A body that does not fit whole is cut and ends with a marker telling the model to load
    the skill again; once less than ``MIN_BODY_TOKENS`` remain, the rest are left out
    (their reminders still name them).
    """
    parts: list[str] = []
    remaining = budget
    for skill in skills:
        header = REATTACHED_HEADER.format(name=skill.name, short=_short(skill.sha256))
        marker = CUT_MARKER.format(name=skill.name)
        room = remaining - count(header) - count(marker) - 2
        if room < MIN_BODY_TOKENS:
            break
        body, cut = cut_to_tokens(skill.body, room, count)
        part = f"{header}\n{body}" + (f"\n{marker}" if cut else "")
        parts.append(part)
        remaining -= count(part) + 1
    return parts


def render_slash(skill: Skill) -> str:
    """The whole body of the run's slash skill, as hidden context of its requests."""
    header = SLASH_HEADER.format(name=skill.name, path=skill.path, short=_short(skill.sha256))
    return f"{header}\n{skill.body}"
