"""Hard-linked skill files: refused when read and left out when a skill folder is listed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph import Context, Models, Settings, build_graph
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.skills import (
    Skill,
    SkillCatalog,
    SkillFileError,
    aread_skill_text,
    list_skill_files,
    read_skill_text,
)
from ctxgraph.store.skills.files import walk_skill_folder

SECRET = "the secret outside the skill folder"


def _skill_with_hard_link(tmp_path: Path) -> tuple[Skill, Path]:
    root = tmp_path / "skills"
    folder = root / "tool"
    (folder / "references").mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: tool\ndescription: A tool skill.\n---\nUse it.\n", encoding="utf-8"
    )
    (folder / "notes.txt").write_text("notes", encoding="utf-8")
    (folder / "alias.md").symlink_to(folder / "notes.txt")
    outside = tmp_path / "secret.txt"
    outside.write_text(SECRET, encoding="utf-8")
    os.link(outside, folder / "references" / "linked.md")
    skill = SkillCatalog([root]).refresh().get("tool")
    assert skill is not None
    return skill, folder


def test_reading_a_hard_link_to_a_file_outside_the_folder_is_refused(tmp_path: Path) -> None:
    skill, _ = _skill_with_hard_link(tmp_path)
    with pytest.raises(SkillFileError, match="is a hard link \\(2 links\\)") as raised:
        read_skill_text(skill, "references/linked.md")
    assert "may lead out of the folder of skill 'tool'" in str(raised.value)
    assert SECRET not in str(raised.value)


async def test_async_reading_a_hard_link_is_refused(tmp_path: Path) -> None:
    skill, _ = _skill_with_hard_link(tmp_path)
    with pytest.raises(SkillFileError, match="is a hard link"):
        await aread_skill_text(skill, "references/linked.md")


def test_a_symlink_inside_the_folder_to_a_hard_link_is_refused(tmp_path: Path) -> None:
    skill, folder = _skill_with_hard_link(tmp_path)
    (folder / "via.md").symlink_to(folder / "references" / "linked.md")
    with pytest.raises(SkillFileError, match="is a hard link"):
        read_skill_text(skill, "via.md")
    assert "via.md" not in walk_skill_folder(folder)


def test_hard_links_are_left_out_of_the_listing(tmp_path: Path) -> None:
    skill, folder = _skill_with_hard_link(tmp_path)
    assert walk_skill_folder(folder) == ("alias.md", "notes.txt")
    assert skill.files == ("alias.md", "notes.txt")
    assert list_skill_files(skill) == ("alias.md", "notes.txt")


def test_a_file_with_a_single_link_and_a_symlink_inside_are_still_read(tmp_path: Path) -> None:
    skill, _ = _skill_with_hard_link(tmp_path)
    assert read_skill_text(skill, "notes.txt") == "notes"
    assert read_skill_text(skill, "alias.md") == "notes"


def test_two_names_inside_the_folder_for_one_file_are_refused_too(tmp_path: Path) -> None:
    skill, folder = _skill_with_hard_link(tmp_path)
    os.link(folder / "notes.txt", folder / "twin.txt")
    with pytest.raises(SkillFileError, match="is a hard link"):
        read_skill_text(skill, "notes.txt")
    assert walk_skill_folder(folder) == ()


def test_the_read_skill_file_tool_returns_the_refusal_to_the_model(tmp_path: Path) -> None:
    skill, _ = _skill_with_hard_link(tmp_path)
    arguments: dict[str, Any] = {"name": "tool", "path": "references/linked.md"}
    main = ScriptedChatModel(
        script=[
            AIMessage(
                content="",
                tool_calls=[{"name": "read_skill_file", "args": arguments, "id": "c1"}],
            ),
            "done",
        ]
    )
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=main),
        settings=Settings(memory_extraction="off", skills_dirs=(str(Path(skill.path).parents[1]),)),
    )
    result = graph.invoke(
        {"messages": [HumanMessage("read it")]},
        {"configurable": {"thread_id": "t"}},
        context=Context(user_id="u"),
    )
    (reply,) = (m for m in result["messages"] if isinstance(m, ToolMessage))
    assert reply.status == "error"
    assert "is a hard link" in str(reply.content)
    assert SECRET not in str(reply.content)


def test_a_hard_linked_skill_md_is_not_loaded_and_is_reported(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = root / "linked"
    folder.mkdir(parents=True)
    outside = tmp_path / "elsewhere.md"
    outside.write_text(
        "---\nname: linked\ndescription: Comes from outside.\n---\nSecret body.\n",
        encoding="utf-8",
    )
    os.link(outside, folder / "SKILL.md")
    snapshot = SkillCatalog([root]).refresh()
    assert snapshot.get("linked") is None
    [problem] = [p for p in snapshot.problems if p.file.endswith("SKILL.md")]
    assert "hard link (2 links)" in problem.message
