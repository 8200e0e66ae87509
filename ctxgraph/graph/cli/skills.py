"""``ctxgraph skills list|show``: the skills of the configured folders, and their problems."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ctxgraph.graph.cli.text import escape_control, plural
from ctxgraph.state.settings import Settings
from ctxgraph.store.skills import Skill, SkillCatalog, SkillProblem, SkillSnapshot, unknown_tools

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

# The graph, its tools and the model clients are imported only on the problem path (see
# ``model_note``): ``skills list`` and ``skills show`` read folders and name tools.

SKILLS_VARIABLE = "CTXGRAPH_SKILLS_DIRS"

SCRIPTED_MODEL = "scripted"
"""``CTXGRAPH_MODEL`` of the offline demo model (``state.models.SCRIPTED_MODEL_NAME``)."""

DEMO_TOOLS = ("calculator",)
"""The names of the demo model's tools (``state.demo_replies.demo_tools``)."""

SKILL_TOOLS = ("load_skill", "read_skill_file")
"""The skill tools the graph binds when skill folders are configured (``SkillTools``)."""

READER_TOOLS = ("read_history", "read_artifact", "grep_artifact")
"""The built-in readers every graph binds."""

MEMORY_SEARCH_TOOL = "memory_search"
"""The memory tool, bound unless ``memory_mode`` is off."""

HOW_TO_CONFIGURE = (
    f"No skill folder is configured. Set {SKILLS_VARIABLE} to folders of skill folders "
    "(each with a SKILL.md), separated by ':', or pass --dir PATH (repeatable), e.g. "
    "`ctxgraph skills list --dir ./skills`."
)


class UnknownSkillError(LookupError):
    """No skill of the configured folders has the requested name."""


def graph_tool_names(tools: Sequence[BaseTool], settings: Settings) -> tuple[str, ...]:
    """The names of every tool the CLI's graph binds when skill folders are configured.

    ``tools`` are the configured tools (the demo model's calculator, if any); the graph
    adds the skill tools, its readers and, unless ``memory_mode`` is off, ``memory_search``.
    """
    from ctxgraph.graph.builder import graph_tools
    from ctxgraph.nodes.skills.sources import SkillSources

    return tuple(tool.name for tool in graph_tools(tools, settings, SkillSources()))


def cli_tool_names(environ: Mapping[str, str], settings: Settings) -> tuple[str, ...]:
    """The names ``graph_tool_names`` gives for the CLI's graph, without building the tools.

    The demo model's calculator when ``CTXGRAPH_MODEL`` is scripted, the skill tools, the
    readers and, unless ``memory_mode`` is off, ``memory_search``, in binding order.
    """
    scripted = environ.get("CTXGRAPH_MODEL", "").strip() == SCRIPTED_MODEL
    memory = (MEMORY_SEARCH_TOOL,) if settings.memory_mode != "off" else ()
    return (*(DEMO_TOOLS if scripted else ()), *SKILL_TOOLS, *READER_TOOLS, *memory)


def model_note(environ: Mapping[str, str]) -> str:
    """A note when no model is configured (the built-in tools only were checked), else "".

    Only the model configuration is read; its clients are created, as the graph would
    create them, so an unusable configuration is found the same way.
    """
    from ctxgraph.state.models import ModelConfigError, Models

    try:
        Models.from_env(environ)
    except ModelConfigError:
        return (
            "the model is not configured, so allowed-tools were checked against the "
            "built-in tools only (CTXGRAPH_MODEL=scripted adds the demo's calculator)"
        )
    return ""


def skill_folders(options: Sequence[str] | None, settings: Settings) -> tuple[str, ...]:
    """The folders to read: every ``--dir``, else the settings' ``skills_dirs``."""
    return tuple(options) if options else settings.skills_dirs


def _allowed(skill: Skill) -> str:
    if skill.allowed_tools is None:
        return "any (no allowed-tools field)"
    return ", ".join(skill.allowed_tools) or "none (an empty allowed-tools list)"


def _catalog(folders: Sequence[str], settings: Settings) -> SkillSnapshot:
    return SkillCatalog(folders, disabled=settings.skills_disabled).refresh()


def list_skills(
    folders: Sequence[str],
    settings: Settings,
    tool_names: Sequence[str],
    out: TextIO,
    *,
    note: str | Callable[[], str] = "",
) -> int:
    """Print every skill of ``folders``, then every problem; 1 when there are problems.

    The problems are those of reading the skills and each ``allowed-tools`` name that no
    tool of ``tool_names`` has; ``note`` (or what it returns, asked only then) follows
    unknown tool names. Without folders it prints how to configure one (status 0).
    """
    if not folders:
        out.write(HOW_TO_CONFIGURE + "\n")
        return 0
    snapshot = _catalog(folders, settings)
    shown = ", ".join(os.path.abspath(folder) for folder in folders)
    out.write(f"skill folders: {escape_control(shown)}\n")
    if settings.skills_from_store:
        out.write("(skills in the Store are not listed: this command reads folders only)\n")
    for skill in snapshot.skills:
        out.write(
            f"\n{skill.name}\n"
            f"  description: {escape_control(' '.join(skill.description.split()))}\n"
            f"  allowed tools: {escape_control(_allowed(skill))}\n"
            f"  ref: {escape_control(skill.path)}\n"
        )
    if not snapshot.skills:
        out.write("\nno skills found\n")
    unknown = unknown_tools(snapshot, tool_names)
    problems: list[SkillProblem] = [*snapshot.problems, *unknown]
    count = plural(len(snapshot.skills), "skill")
    if not problems:
        out.write(f"\n{count}; problems: none\n")
        return 0
    out.write(f"\n{count}; problems ({len(problems)}):\n")
    out.writelines(f"- {escape_control(str(problem))}\n" for problem in problems)
    shown_note = (note() if callable(note) else note) if unknown else ""
    if shown_note:
        out.write(f"note: {shown_note}\n")
    return 1


def show_skill(folders: Sequence[str], settings: Settings, name: str, out: TextIO) -> int:
    """Print one skill: its front matter, its supporting files and its whole body.

    Raises ``UnknownSkillError`` (with close matches, or the problem that kept a skill of
    that name out) when no skill is called ``name``.
    """
    if not folders:
        raise UnknownSkillError(f"no skill {name!r}: {HOW_TO_CONFIGURE}")
    snapshot = _catalog(folders, settings)
    skill = snapshot.get(name)
    if skill is None:
        raise UnknownSkillError(_unknown(name, folders, snapshot))
    files = ", ".join(skill.files) or "none"
    out.write(
        f"name: {skill.name}\n"
        f"description: {escape_control(' '.join(skill.description.split()))}\n"
        f"allowed tools: {escape_control(_allowed(skill))}\n"
        f"ref: {escape_control(skill.path)}\n"
        f"sha256: {skill.sha256}\n"
        f"supporting files: {escape_control(files)}\n\n"
        f"{escape_control(skill.body)}\n"
    )
    return 0


def _unknown(name: str, folders: Sequence[str], snapshot: SkillSnapshot) -> str:
    """Why no skill is called ``name``: its folder's problem, or the close matches."""
    for problem in snapshot.problems:
        path = Path(problem.file)
        if path.name == "SKILL.md" and path.parent.name == name:
            return f"skill {name!r} cannot be used: {problem}"
    where = ", ".join(os.path.abspath(folder) for folder in folders)
    close = snapshot.close_matches(name)
    if close:
        hint = f"close matches: {', '.join(close)}"
    elif snapshot.names:
        hint = f"the skills are: {', '.join(snapshot.names)}"
    else:
        hint = "it has no skills"
    return f"no skill {name!r} in {where}; {hint}"


def skills_command(
    command: str, options: Sequence[str] | None, name: str | None, out: TextIO
) -> int:
    """Run ``skills list`` or ``skills show NAME`` with the ``--dir`` ``options``.

    Neither starts a database: they read the folders only. The problems are printed
    here, so the catalog's own warnings about them are not logged as well.
    """
    logging.getLogger("ctxgraph.skills").setLevel(logging.ERROR)
    if command == "show":
        settings = Settings.from_env(os.environ)
        return show_skill(skill_folders(options, settings), settings, name or "", out)
    settings = Settings.from_env(os.environ)
    tool_names = cli_tool_names(os.environ, settings)
    folders = skill_folders(options, settings)
    return list_skills(folders, settings, tool_names, out, note=lambda: model_note(os.environ))
