"""``ctxgraph skills list|show``, ``/name`` completion in chat, and the demo model's skill rules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from ctxgraph.graph.cli.chat import SlashCompleter, slash_completions
from ctxgraph.graph.cli.demo import example_skills_dir
from ctxgraph.graph.cli.skills import graph_tool_names
from ctxgraph.state.demo_replies import calculator, demo_chat_reply
from ctxgraph.state.settings import Settings
from ctxgraph.store.skills import SkillCatalog
from tests.support.cli import REPO_ROOT

REPORT = """---
name: report-writer
description: Writes short reports from notes. Use it when the user asks for a report.
allowed-tools: calculator read_history
---

1. Read the notes.
2. Write the report.
"""

FREE = """---
name: free-form
description: Answers in free form, with any tool.
---

Answer as you see fit.
"""

NO_TOOLS = """---
name: no-tools
description: Answers from what is in the conversation, without tools.
allowed-tools: []
---

Use no tool.
"""

UNKNOWN_TOOL = """---
name: web-lookup
description: Looks things up on the web.
allowed-tools: [web_search, calculator]
---

Search first.
"""

MALFORMED = """---
name: broken
---

No description.
"""


def write_skill(root: Path, folder: str, text: str, files: dict[str, str] | None = None) -> Path:
    """Write ``root/folder/SKILL.md`` and any supporting ``files`` (relative path: text)."""
    skill = root / folder
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(text, encoding="utf-8")
    for relative, content in (files or {}).items():
        path = skill / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return skill


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A child environment with the demo model and no database configured."""
    drop = ("OPENAI_", "CTXGRAPH_", "DATABASE_URI")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    clean.update(
        {
            "CTXGRAPH_MODEL": "scripted",
            "CTXGRAPH_HOME": str(tmp_path / "home"),
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    return clean


def skills_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ctxgraph.graph.cli skills ARGS``."""
    return subprocess.run(
        [sys.executable, "-m", "ctxgraph.graph.cli", "skills", *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_list_shows_every_skill_and_exits_0_without_problems(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root = tmp_path / "skills"
    write_skill(root, "report-writer", REPORT)
    write_skill(root, "free-form", FREE)
    write_skill(root, "no-tools", NO_TOOLS)
    result = skills_cli(env, "list", "--dir", str(root))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert out.index("\nfree-form\n") < out.index("\nno-tools\n") < out.index("\nreport-writer\n")
    report = out[out.index("\nreport-writer\n") :]
    assert "  description: Writes short reports from notes." in report
    assert "  allowed tools: calculator, read_history\n" in report
    assert f"  ref: {root / 'report-writer' / 'SKILL.md'}\n" in report
    free = out[out.index("\nfree-form\n") : out.index("\nno-tools\n")]
    assert "allowed tools: any" in free
    assert "allowed tools: none" in out[out.index("\nno-tools\n") :]
    assert "3 skills; problems: none" in out
    assert result.stderr == ""
    assert not (tmp_path / "home").exists(), "skills list started a database"


def test_a_malformed_skill_is_a_problem_and_the_others_list(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root = tmp_path / "skills"
    write_skill(root, "free-form", FREE)
    write_skill(root, "broken", MALFORMED)
    result = skills_cli(env, "list", "--dir", str(root))
    assert result.returncode == 1
    out = result.stdout
    assert "\nfree-form\n" in out
    assert "\nbroken\n" not in out
    problems = out[out.index("problems (1):") :]
    assert f"- {root / 'broken' / 'SKILL.md'}: description: missing" in problems
    assert result.stderr == "", "the problem is printed once, not also logged"


def test_an_allowed_tool_no_tool_has_is_reported(tmp_path: Path, env: dict[str, str]) -> None:
    root = tmp_path / "skills"
    write_skill(root, "web-lookup", UNKNOWN_TOOL)
    result = skills_cli(env, "list", "--dir", str(root))
    assert result.returncode == 1
    problems = result.stdout[result.stdout.index("problems (1):") :]
    assert "web-lookup/SKILL.md: allowed-tools: unknown tool 'web_search'" in problems
    assert "'calculator'" not in problems  # the demo model's tool is bound


def test_without_a_model_the_builtin_tools_are_checked_and_said_so(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root = tmp_path / "skills"
    write_skill(root, "report-writer", REPORT)
    del env["CTXGRAPH_MODEL"]
    result = skills_cli(env, "list", "--dir", str(root))
    assert result.returncode == 1
    assert "unknown tool 'calculator'" in result.stdout
    assert "note: the model is not configured" in result.stdout


def test_dirs_come_from_the_environment_and_a_missing_one_is_a_problem(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root = tmp_path / "skills"
    write_skill(root, "free-form", FREE)
    env["CTXGRAPH_SKILLS_DIRS"] = f"{root}:{tmp_path / 'missing'}"
    result = skills_cli(env, "list")
    assert result.returncode == 1
    assert "\nfree-form\n" in result.stdout
    assert f"- {tmp_path / 'missing'}: folder not found" in result.stdout
    # --dir replaces the environment's folders.
    only = skills_cli(env, "list", "--dir", str(root))
    assert only.returncode == 0, only.stdout


def test_list_without_folders_says_how_to_configure_one(env: dict[str, str]) -> None:
    result = skills_cli(env, "list")
    assert result.returncode == 0
    assert "CTXGRAPH_SKILLS_DIRS" in result.stdout and "--dir" in result.stdout


def test_show_prints_front_matter_files_and_body(tmp_path: Path, env: dict[str, str]) -> None:
    root = tmp_path / "skills"
    write_skill(root, "report-writer", REPORT, {"references/style.md": "Be brief.\n"})
    result = skills_cli(env, "show", "report-writer", "--dir", str(root))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("name: report-writer\ndescription: Writes short reports")
    assert "allowed tools: calculator, read_history\n" in out
    assert "sha256: " in out
    assert "supporting files: references/style.md\n" in out
    assert out.endswith("\n1. Read the notes.\n2. Write the report.\n")


def test_show_of_an_unknown_name_exits_2_with_close_matches(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root = tmp_path / "skills"
    write_skill(root, "report-writer", REPORT)
    write_skill(root, "broken", MALFORMED)
    result = skills_cli(env, "show", "report-writr", "--dir", str(root))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "no skill 'report-writr'" in lines[0] and "close matches: report-writer" in lines[0]
    # A skill kept out by a problem says why.
    broken = skills_cli(env, "show", "broken", "--dir", str(root))
    assert broken.returncode == 2
    assert "skill 'broken' cannot be used" in broken.stderr
    assert "description: missing" in broken.stderr


def test_graph_tool_names_follow_the_memory_mode() -> None:
    names = graph_tool_names([calculator], Settings())
    assert names[0] == "calculator"
    assert {"load_skill", "read_skill_file", "read_history", "memory_search"} <= set(names)
    assert "memory_search" not in graph_tool_names([], Settings(memory_mode="off"))


def test_slash_completions() -> None:
    names = ["trip-budget", "packing-list", "travel-notes"]
    assert slash_completions("/tr", names) == ["/travel-notes", "/trip-budget"]
    assert slash_completions("/trip-budget", names) == ["/trip-budget"]
    assert slash_completions("/he", names) == ["/help"]
    assert slash_completions("/zz", names) == []
    assert slash_completions("tr", names) == []
    every = slash_completions("/", names)
    assert every == sorted(every)
    assert {"/packing-list", "/compact", "/memory", "/new", "/status", "/exit"} <= set(every)


def test_the_completer_rereads_the_folders_and_completes_only_at_the_line_start(
    tmp_path: Path,
) -> None:
    root = tmp_path / "skills"
    write_skill(root, "report-writer", REPORT)
    before = ""
    completer = SlashCompleter(SkillCatalog([root]), lambda: before)
    assert completer("/rep", 0) == "/report-writer"
    assert completer("/rep", 1) is None
    write_skill(root, "free-form", FREE)
    assert completer("/fr", 0) == "/free-form"
    before = "say "
    assert completer("/fr", 0) is None


def test_chat_on_piped_stdin_is_unchanged(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    env = {**subprocess_env, "CTXGRAPH_SKILLS_DIRS": str(REPO_ROOT / "examples" / "skills")}
    result = subprocess.run(
        [python, "-m", "ctxgraph.graph.cli", "chat", "--user", "u", "--thread", thread_id],
        env=env,
        cwd=REPO_ROOT,
        input="/trip-budget What is 2 * 3?\n",
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "you: /trip-budget What is 2 * 3?\n" in result.stdout
    assert "The calculator says 6. I followed the trip-budget skill" in result.stdout


def test_the_example_skills_parse_without_problems() -> None:
    folder = example_skills_dir()
    assert folder == REPO_ROOT / "examples" / "skills"
    snapshot = SkillCatalog([folder]).refresh()
    assert snapshot.problems == ()
    assert snapshot.names == ("packing-list", "trip-budget")
    budget = snapshot.get("trip-budget")
    packing = snapshot.get("packing-list")
    assert budget is not None and packing is not None
    assert budget.allowed_tools == ("calculator",)
    assert packing.allowed_tools is None
    assert budget.files == ("references/rates.md",)
    assert packing.files == ("references/essentials.md",)


LISTING = (
    "You are a helpful assistant.\n\n"
    "Skills you can use (name: description [ref]). When a task fits a skill, call "
    "load_skill(name) first.\n"
    "- packing-list: Drafts a short packing list. [/skills/packing-list/SKILL.md]\n"
    "- trip-budget: Checks travel costs. [/skills/trip-budget/SKILL.md]"
)


def test_the_demo_model_loads_a_skill_the_user_names() -> None:
    user = HumanMessage("Use the packing-list skill for my trip.", id="abcdef1234")
    reply = demo_chat_reply([SystemMessage(LISTING), user])
    assert reply.tool_calls[0]["name"] == "load_skill"
    assert reply.tool_calls[0]["args"] == {"name": "packing-list"}
    loaded = ToolMessage(
        "Skill packing-list loaded (ref /skills/packing-list/SKILL.md, sha256 ab).\n"
        "Supporting files (read_skill_file): none\n\n# Packing\n\n1. Check the dates\n"
        "   and the season.\n2. Pack.",
        tool_call_id="call_abcdef12",
        name="load_skill",
    )
    answer = demo_chat_reply([SystemMessage(LISTING), user, reply, loaded])
    assert answer.content == (
        'I loaded the packing-list skill and will follow it. Its first step: "Check the '
        'dates and the season."'
    )
    # Without a listing, naming a skill is an ordinary message.
    plain = demo_chat_reply([SystemMessage("You are a helpful assistant."), user])
    assert isinstance(plain, AIMessage) and plain.content.startswith("Noted:")


def test_the_demo_model_follows_a_slash_skill_and_names_active_skills() -> None:
    skills = HumanMessage(
        "Active skills of this thread (a record).\n"
        "- trip-budget: ref /skills/trip-budget/SKILL.md, sha256 0123456789ab\n"
        "Tool policy: every tool is allowed.\n\n"
        "The user activated the skill trip-budget with /trip-budget for this turn.\n1. Go.",
        additional_kwargs={"origin": "skills"},
    )
    user = HumanMessage("/trip-budget What is 180 * 7?", id="0123456789")
    call = demo_chat_reply([SystemMessage(LISTING), user, skills])
    assert call.tool_calls[0]["name"] == "calculator"
    result = ToolMessage("1260", tool_call_id="call_01234567", name="calculator")
    answer = demo_chat_reply([SystemMessage(LISTING), user, skills, call, result])
    assert answer.content == (
        "The calculator says 1260. I followed the trip-budget skill you activated with "
        "/trip-budget."
    )
    recall = HumanMessage("What did I say before?")
    reminder = HumanMessage(
        str(skills.content).split("\n\n")[0], additional_kwargs=skills.additional_kwargs
    )
    said = demo_chat_reply([SystemMessage(LISTING), user, reminder, recall])
    assert str(said.content).endswith("Active skills: trip-budget.")
