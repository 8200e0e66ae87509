"""The ``load_skill`` and ``read_skill_file`` tools: the model reads skills on demand."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolRuntime
from langgraph.types import Command

from ctxgraph.nodes.gates import ALWAYS_BOUND_ALLOWED, GatedTool
from ctxgraph.nodes.settings import settings_for
from ctxgraph.nodes.skills.active import cut_to_tokens
from ctxgraph.nodes.skills.record import activation
from ctxgraph.nodes.skills.sources import SkillSources
from ctxgraph.state.context import Context
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import count_text
from ctxgraph.store.skills import (
    Skill,
    SkillSnapshot,
    alist_skill_files,
    aread_skill_text,
    list_skill_files,
    read_skill_text,
)

LOAD_SKILL = "load_skill"
READ_SKILL_FILE = "read_skill_file"
SKILL_KWARG = "skill"
"""``additional_kwargs`` key of a ``load_skill`` result: the skill's name, path and hash."""

MAX_BODY_TOKENS = 16_000
"""The most tokens of a body one ``load_skill`` result carries; the rest is paged."""
MAX_FILE_TOKENS = 4_000
"""The most tokens one ``read_skill_file`` result carries."""
MAX_LINES = 1_000
MAX_LINE_CHARS = 2_000

LOAD_DESCRIPTION = (
    "Load a listed skill's instructions and file list by its exact `name`; it stays "
    "active for the thread."
)
READ_DESCRIPTION = (
    "Read a skill's supporting file (`path` as load_skill lists it) as numbered lines from "
    "`offset`."
)


class SkillTools:
    """Builds both tools over a graph's skill sources and settings."""

    def __init__(self, sources: SkillSources, settings: Settings) -> None:
        self._sources = sources
        self._settings = settings

    def _skill(self, runtime: ToolRuntime[Context], name: str) -> tuple[Skill, Settings]:
        settings = settings_for(runtime.context, self._settings)
        snapshot = self._sources.current(settings)
        skill = snapshot.get(name)
        if skill is None:
            raise ValueError(unknown_skill(name, snapshot))
        return skill, settings

    def load(self, runtime: ToolRuntime[Context], name: str) -> Command[Any]:
        """Load a skill's body and record it as active."""
        skill, settings = self._skill(runtime, name)
        files = list_skill_files(skill, runtime.store)
        return self._loaded(runtime, skill, files, settings)

    async def aload(self, runtime: ToolRuntime[Context], name: str) -> Command[Any]:
        """Async :meth:`load`."""
        skill, settings = self._skill(runtime, name)
        files = await alist_skill_files(skill, runtime.store)
        return self._loaded(runtime, skill, files, settings)

    def _loaded(
        self,
        runtime: ToolRuntime[Context],
        skill: Skill,
        files: tuple[str, ...],
        settings: Settings,
    ) -> Command[Any]:
        call_id = runtime.tool_call_id or ""
        result = ToolMessage(
            content=render_loaded(skill, files),
            tool_call_id=call_id,
            name=LOAD_SKILL,
            additional_kwargs={
                SKILL_KWARG: {"name": skill.name, "path": skill.path, "sha256": skill.sha256}
            },
        )
        update = activation(skill, "load_skill", settings, call_id)
        return Command(update={"messages": [result], "skill_context": update})

    def read(
        self,
        runtime: ToolRuntime[Context],
        name: str,
        path: str,
        offset: int = 0,
        limit: int = 200,
    ) -> str:
        """Read a page of a skill's supporting file."""
        skill, _ = self._skill(runtime, name)
        return page_of(skill, path, read_skill_text(skill, path, runtime.store), offset, limit)

    async def aread(
        self,
        runtime: ToolRuntime[Context],
        name: str,
        path: str,
        offset: int = 0,
        limit: int = 200,
    ) -> str:
        """Async :meth:`read`."""
        skill, _ = self._skill(runtime, name)
        text = await aread_skill_text(skill, path, runtime.store)
        return page_of(skill, path, text, offset, limit)

    def tools(self) -> list[BaseTool]:
        """``load_skill`` and ``read_skill_file``, to bind to the main model."""
        return [
            GatedTool.from_function(
                func=self.load,
                coroutine=self.aload,
                name=LOAD_SKILL,
                description=LOAD_DESCRIPTION,
                gate=ALWAYS_BOUND_ALLOWED,
            ),
            GatedTool.from_function(
                func=self.read,
                coroutine=self.aread,
                name=READ_SKILL_FILE,
                description=READ_DESCRIPTION,
                gate=ALWAYS_BOUND_ALLOWED,
            ),
        ]


def unknown_skill(name: str, snapshot: SkillSnapshot) -> str:
    """The error for a name that is not a loadable skill, with close matches."""
    close = snapshot.close_matches(name)
    hint = f" Close matches: {', '.join(close)}." if close else ""
    if not snapshot.names:
        hint = " No skills are available."
    return f"There is no skill called {name!r}.{hint}"


def render_loaded(skill: Skill, files: tuple[str, ...]) -> str:
    """The text of a ``load_skill`` result: what was loaded, its files, then the body."""
    listed = ", ".join(files) if files else "none"
    body, cut = cut_to_tokens(skill.body, MAX_BODY_TOKENS, count_text)
    if cut:
        body += (
            f"\n[cut at {MAX_BODY_TOKENS} tokens: read the rest with "
            f"read_skill_file({skill.name!r}, 'SKILL.md', offset=...)]"
        )
    return (
        f"Skill {skill.name} loaded (ref {skill.path}, sha256 {skill.sha256}).\n"
        f"Supporting files (read_skill_file): {listed}\n\n{body}"
    )


def page_of(skill: Skill, path: str, text: str, offset: int, limit: int) -> str:
    """Numbered lines of ``text`` from ``offset``: at most ``limit`` and ``MAX_FILE_TOKENS``."""
    if offset < 0:
        raise ValueError(f"offset must be 0 or more, got {offset}")
    limit = max(1, min(limit, MAX_LINES))
    lines = text.splitlines()
    head = f"[{skill.name}/{path}: {len(lines)} lines]"
    if not lines:
        return f"{head}\n[the file is empty]"
    if offset >= len(lines) and lines:
        return f"{head}\n[offset {offset} is past the end (lines 0-{len(lines) - 1})]"
    shown: list[str] = []
    used = count_text(head) + 40
    for number in range(offset, min(len(lines), offset + limit)):
        line = lines[number]
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + " [line cut]"
        row = f"{number}\t{line}"
        cost = count_text(row) + 1
        if shown and used + cost > MAX_FILE_TOKENS:
            break
        shown.append(row)
        used += cost
    end = offset + len(shown)
    footer = (
        f"[end of file: lines {offset}-{end - 1} of {len(lines)}]"
        if end >= len(lines)
        else f"[lines {offset}-{end - 1} of {len(lines)}; next offset: {end}]"
    )
    return "\n".join([head, *shown, footer])
