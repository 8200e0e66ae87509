"""Subagent files: a folder of Markdown specs, read into ``SubagentSpec``s for the graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import BaseTool, tool

import ctxgraph.graph.environment as environment
from ctxgraph.graph.environment import SUBAGENTS_VARIABLE, EnvironmentConfig
from ctxgraph.graph.subagent_files import SubagentFileError, read_subagent_specs
from ctxgraph.nodes.parts import SubagentsPart
from ctxgraph.state.subagents import SubagentSpec
from tests.support.cli import REPO_ROOT


@tool
def lookup(query: str) -> str:
    """Look a query up."""
    return query


@tool
def fetch_page(url: str) -> str:
    """Fetch a page."""
    return url


TOOLS: dict[str, BaseTool] = {"lookup": lookup, "fetch_page": fetch_page}

REVIEWER = """---
name: reviewer
description: Reviews a draft for mistakes.
---

Check the draft and list every mistake.
"""

ANALYST = """---
name: analyst
description: >
  Answers questions about figures.
tools: [lookup, fetch_page]
---
# Analyst

Look the figures up and report them with their sources.
"""


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def spec_file(
    *,
    name: str = "helper",
    description: str = "description: Helps.",
    extra: str = "",
    body: str = "Do the work.",
) -> str:
    return f"---\nname: {name}\n{description}\n{extra}---\n\n{body}\n"


def test_a_folder_gives_one_spec_per_file_in_file_name_order(tmp_path: Path) -> None:
    write(tmp_path, "b-reviewer.md", REVIEWER)
    write(tmp_path, "a-analyst.md", ANALYST)
    write(tmp_path, "notes.txt", "not a spec")
    write(tmp_path, ".draft.md", "not a spec either")
    (tmp_path / "nested.md").mkdir()

    specs = read_subagent_specs(tmp_path, TOOLS)

    assert specs == (
        SubagentSpec(
            name="analyst",
            description="Answers questions about figures.",
            system_prompt="# Analyst\n\nLook the figures up and report them with their sources.",
            tools=(lookup, fetch_page),
        ),
        SubagentSpec(
            name="reviewer",
            description="Reviews a draft for mistakes.",
            system_prompt="Check the draft and list every mistake.",
        ),
    )


def test_tools_are_the_given_tool_objects_in_the_listed_order(tmp_path: Path) -> None:
    write(tmp_path, "x.md", spec_file(extra="tools:\n  - fetch_page\n  - lookup\n  - lookup\n"))
    (spec,) = read_subagent_specs(str(tmp_path), TOOLS)
    assert spec.tools[0] is fetch_page
    assert spec.tools[1] is lookup
    assert len(spec.tools) == 2


def test_an_empty_tools_list_and_an_empty_folder_are_fine(tmp_path: Path) -> None:
    assert read_subagent_specs(tmp_path, TOOLS) == ()
    write(tmp_path, "x.md", spec_file(extra="tools: []\n"))
    assert read_subagent_specs(tmp_path, {})[0].tools == ()


def test_a_bom_and_crlf_line_ends_are_accepted(tmp_path: Path) -> None:
    text = "\ufeff" + spec_file(body="Line one.\nLine two.").replace("\n", "\r\n")
    write(tmp_path, "x.md", text)
    (spec,) = read_subagent_specs(tmp_path, TOOLS)
    assert (spec.name, spec.system_prompt) == ("helper", "Line one.\nLine two.")


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        ("Just a prompt.\n", None, "no front matter"),
        ("---\nname: helper\ndescription: Helps.\n\nNo closing fence.\n", None, "not closed"),
        ("---\nname: [helper\ndescription: Helps.\n---\nBody.\n", None, "invalid YAML"),
        ("---\n- name\n---\nBody.\n", None, "YAML mapping"),
        ("---\n---\nBody.\n", None, "YAML mapping"),
        (spec_file(name="''"), "name", "not 1-64"),
        ("---\ndescription: Helps.\n---\nBody.\n", "name", "missing"),
        (spec_file(name="12"), "name", "must be a string"),
        (spec_file(name="Research Helper"), "name", "'Research Helper'"),
        (spec_file(name="-helper"), "name", "for example 'researcher'"),
        (spec_file(name="a" * 65), "name", "1-64"),
        ("---\nname: helper\n---\nBody.\n", "description", "missing"),
        (spec_file(description="description: '  '"), "description", "is empty"),
        (spec_file(description="description: [a, b]"), "description", "must be a string"),
        (spec_file(body=""), "body", "system prompt"),
        (spec_file(body="   \n\n  "), "body", "is empty"),
        (spec_file(extra="tools: lookup\n"), "tools", "YAML list of tool names"),
        (spec_file(extra="tools: [lookup, 3]\n"), "tools", "item 1"),
        (spec_file(extra="tools: [search]\n"), "tools", "unknown tool 'search'"),
        (spec_file(extra="tools: [search]\n"), "tools", "fetch_page, lookup"),
        (spec_file(extra="model: gpt-main\n"), "model", "SubagentSpec(model=...)"),
        (spec_file(extra="model: null\n"), "model", "in Python"),
        (spec_file(extra="prompt: hi\n"), "prompt", "unknown front-matter field"),
    ],
)
def test_a_bad_file_is_an_error_naming_the_file_and_the_field(
    tmp_path: Path, text: str, field: str | None, expected: str
) -> None:
    write(tmp_path, "a-good.md", REVIEWER)
    path = write(tmp_path, "b-bad.md", text)

    with pytest.raises(SubagentFileError) as caught:
        read_subagent_specs(tmp_path, TOOLS)

    message = str(caught.value)
    prefix = f"{path}: {field}: " if field else f"{path}: "
    assert message.startswith(prefix), message
    assert expected in message, message


def test_an_unknown_tool_without_available_tools_says_to_list_none(tmp_path: Path) -> None:
    path = write(tmp_path, "x.md", spec_file(extra="tools: [calculator]\n"))
    with pytest.raises(SubagentFileError, match="unknown tool 'calculator'") as caught:
        read_subagent_specs(tmp_path, {})
    assert str(caught.value).startswith(f"{path}: tools: ")
    assert "remove the field" in str(caught.value)


def test_a_file_that_is_not_utf8_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "x.md"
    path.write_bytes(spec_file().encode("utf-8") + b"\xff\xfe")
    with pytest.raises(SubagentFileError, match="not UTF-8") as caught:
        read_subagent_specs(tmp_path, TOOLS)
    assert str(caught.value).startswith(f"{path}: ")


def test_one_name_in_two_files_is_an_error_naming_both(tmp_path: Path) -> None:
    first = write(tmp_path, "a.md", REVIEWER)
    second = write(tmp_path, "b.md", REVIEWER.replace("for mistakes", "again"))
    with pytest.raises(SubagentFileError) as caught:
        read_subagent_specs(tmp_path, TOOLS)
    message = str(caught.value)
    assert message.startswith(f"{second}: name: 'reviewer' is already defined by {first}")


def test_a_missing_folder_or_a_file_instead_of_a_folder_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(SubagentFileError, match="no such folder") as caught:
        read_subagent_specs(missing, TOOLS)
    assert str(caught.value).startswith(f"{missing}: ")
    file = write(tmp_path, "a.md", REVIEWER)
    with pytest.raises(SubagentFileError, match="not a folder") as caught:
        read_subagent_specs(file, TOOLS)
    assert str(caught.value).startswith(f"{file}: ")


def test_the_example_folder_parses() -> None:
    specs = read_subagent_specs(REPO_ROOT / "examples" / "subagents", {})
    assert [spec.name for spec in specs] == ["researcher"]
    (researcher,) = specs
    assert researcher.tools == ()
    assert researcher.model is None
    assert "delegated question" in researcher.system_prompt
    assert not researcher.system_prompt.startswith("---")


BUILT = object()
"""What the stand-in ``build_graph`` returns."""


def capture_build_graph(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    captured: dict[str, Any] = {}

    def fake_create_builder(**kwargs: Any) -> object:
        captured.update(kwargs)
        (part,) = [p for p in kwargs["parts"] if isinstance(p, SubagentsPart)]
        captured["subagents"] = part.subagents
        return BUILT

    monkeypatch.setattr(environment, "create_builder", fake_create_builder)
    monkeypatch.setattr(environment, "compile_graph", lambda built, **_: built)
    return captured


def test_the_environment_passes_the_folders_specs_to_the_builder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "reviewer.md", REVIEWER)
    write(tmp_path, "budget.md", spec_file(name="budget", extra="tools: [calculator]\n"))
    captured = capture_build_graph(monkeypatch)

    configured = EnvironmentConfig.read(
        {"CTXGRAPH_MODEL": "scripted", SUBAGENTS_VARIABLE: f" {tmp_path} "}
    )
    assert configured.build() is BUILT

    specs = captured["subagents"]
    assert [spec.name for spec in specs] == ["budget", "reviewer"]
    assert specs[0].tools == configured.tools
    assert captured["tools"] == configured.tools


def test_without_the_variable_no_subagents_reach_the_builder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    captured = capture_build_graph(monkeypatch)
    for environ in (
        {"CTXGRAPH_MODEL": "scripted"},
        {"CTXGRAPH_MODEL": "scripted", SUBAGENTS_VARIABLE: " "},
    ):
        captured.clear()
        configured = EnvironmentConfig.read(environ)
        configured.build()
        assert configured.subagents == ()
        assert not captured.get("subagents")
        assert set(captured) >= {"models", "tools", "settings"}


def test_a_bad_folder_fails_reading_the_environment_naming_the_variable(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "x.md", spec_file(extra="tools: [lookup]\n"))
    with pytest.raises(SubagentFileError) as caught:
        EnvironmentConfig.read({"CTXGRAPH_MODEL": "scripted", SUBAGENTS_VARIABLE: str(tmp_path)})
    message = str(caught.value)
    assert message.startswith(f"{SUBAGENTS_VARIABLE}: {path}: tools: unknown tool 'lookup'")
    assert "calculator" in message


def test_the_example_folder_builds_a_graph_with_the_scripted_model() -> None:
    configured = EnvironmentConfig.read(
        {
            "CTXGRAPH_MODEL": "scripted",
            SUBAGENTS_VARIABLE: str(REPO_ROOT / "examples" / "subagents"),
        }
    )
    graph = configured.build()
    assert "subagent" in graph.get_graph().nodes
