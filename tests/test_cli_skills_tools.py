"""``skills list`` names the CLI graph's tools without building them, and names them right."""

from __future__ import annotations

import pytest

from ctxgraph.graph.cli import skills
from ctxgraph.graph.environment import EnvironmentConfig
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.state.models import SCRIPTED_MODEL_NAME
from ctxgraph.state.settings import Settings


@pytest.mark.parametrize(
    "environ",
    [
        {"CTXGRAPH_MODEL": "scripted"},
        {"CTXGRAPH_MODEL": "scripted", "CTXGRAPH_MEMORY_MODE": "off"},
        {"CTXGRAPH_MODEL": "gpt-4o-mini", "OPENAI_API_KEY": "sk-test"},
        {"CTXGRAPH_MODEL": "gpt-4o-mini", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
    ],
    ids=["scripted", "scripted-memory-off", "openai", "local-endpoint"],
)
def test_the_cli_tool_names_are_those_of_the_built_graph(environ: dict[str, str]) -> None:
    configured = EnvironmentConfig.read(environ)
    built = skills.graph_tool_names(configured.tools, configured.settings)
    assert skills.cli_tool_names(environ, Settings.from_env(environ)) == built


def test_without_a_model_the_names_are_the_built_in_tools_and_a_note_says_so() -> None:
    environ: dict[str, str] = {}
    settings = Settings.from_env(environ)
    assert skills.cli_tool_names(environ, settings) == skills.graph_tool_names((), settings)
    assert skills.model_note(environ).startswith("the model is not configured")
    assert skills.model_note({"CTXGRAPH_MODEL": "scripted"}) == ""


def test_the_names_written_in_the_cli_match_their_sources() -> None:
    assert skills.SCRIPTED_MODEL == SCRIPTED_MODEL_NAME
    assert tuple(tool.name for tool in demo_tools()) == skills.DEMO_TOOLS
