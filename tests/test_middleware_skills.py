"""Skills through ``create_agent``: a loaded skill's ``allowed-tools`` is enforced twice.

After ``load_skill`` the requests bind only the tools the skill allows (and the built-in
readers), and a call of any other tool is answered with an error ``ToolMessage`` without
the tool running; an allowed tool runs as before.
"""

from __future__ import annotations

from pathlib import Path

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.middleware import SkillsMiddleware, ctxgraph_middleware
from ctxgraph.nodes.skills.policy import ALWAYS_ALLOWED
from ctxgraph.state import Context, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel, bound_tool_names
from tests.support.agents import config
from tests.support.scripted import tool_call
from tests.support.skill_files import WRITES, read_file, write_file, write_skill

CTX = Context(user_id="u-skills")


def test_a_loaded_skill_unbinds_and_refuses_the_tools_it_does_not_allow(tmp_path: Path) -> None:
    WRITES.clear()
    write_skill(tmp_path, "reader", "Reads files, never writes.", "Only read files.", ["read_file"])
    main = ScriptedChatModel(
        script=[
            tool_call("load_skill", {"name": "reader"}, "c1"),
            tool_call("write_file", {"path": "a.txt", "text": "x"}, "c2"),
            tool_call("read_file", {"path": "a.txt"}, "c3"),
            AIMessage("done"),
        ]
    )
    settings = Settings(skills_dirs=(str(tmp_path),), memory_extraction="off")
    middleware = ctxgraph_middleware(settings=settings)
    assert any(isinstance(m, SkillsMiddleware) for m in middleware)
    agent = create_agent(
        main,
        [read_file, write_file],
        middleware=middleware,
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        context_schema=Context,
    )
    result = agent.invoke({"messages": [HumanMessage("Look at a.txt.")]}, config("t"), context=CTX)

    before, *after = (bound_tool_names(tools) for tools in main.tool_requests)
    assert {"read_file", "write_file", "load_skill"} <= before
    assert len(after) == 3
    for names in after:
        assert "read_file" in names and names <= ALWAYS_ALLOWED | {"read_file"}
    loaded, refused, read = (m for m in result["messages"] if isinstance(m, ToolMessage))
    assert loaded.status == "success" and "Only read files." in loaded.text
    assert refused.tool_call_id == "c2" and refused.status == "error"
    assert "not allowed by the skill tool policy" in refused.text and "reader" in refused.text
    assert WRITES == []  # the refused tool never ran
    assert read.status == "success" and read.text == "contents of a.txt"
    assert result["messages"][-1].text == "done"
