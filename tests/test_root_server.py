"""Under ``langgraph dev``, the graphs of one ``CtxGraph`` share its seams.

The served module builds the agent and the memory worker from one root with a caller's
extraction prompt; a run with deferred extraction leaves its turn queued, and the
``memory_worker`` run that processes it sends the memory model the caller's prompt (the
served memory model notes each prompt it receives in a file).
"""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest
from langgraph_sdk import get_sync_client

from tests.test_langgraph_dev import RUN_TIMEOUT, dev_server, server_env

RULE = "House rules (served root): remember only what the user says about their work."

GRAPH_MODULE = textwrap.dedent(
    f"""
    from pathlib import Path

    from ctxgraph import CtxGraph, MemoryPart, Models, ServerJobQueue, Settings
    from ctxgraph.state.demo_replies import demo_memory, demo_tools
    from ctxgraph.graph.demo import demo_reply
    from ctxgraph.state.scripted_model import ScriptedChatModel

    HERE = Path(__file__).resolve().parent
    PROMPT = "{RULE}\\nProfile: {{profile}}\\nFacts: {{facts}}\\n{{conversation}}"


    def noted(messages):
        with (HERE / "prompts").open("a") as prompts:
            prompts.write(" ".join(str(m.content) for m in messages).replace("\\n", " ") + "\\n")
        return demo_memory(str(messages[-1].content))


    root = CtxGraph(
        Models(
            main=ScriptedChatModel(responder=demo_reply),
            memory=ScriptedChatModel(responder=noted),
        ),
        Settings(memory_extraction="deferred"),
        tools=demo_tools(),
        parts=[MemoryPart(extraction_prompt=PROMPT)],
    )
    graph = root.agent(compaction_queue=ServerJobQueue())
    memory_worker = root.memory_worker()
    compaction_worker = root.compaction_worker()
    forget = root.forget()
    """
)


def served_folder(folder: Path) -> Path:
    folder.mkdir()
    (folder / "root_app.py").write_text(GRAPH_MODULE, encoding="utf-8")
    graphs = {
        name: f"./root_app.py:{attribute}"
        for name, attribute in [
            ("ctxgraph", "graph"),
            ("memory_worker", "memory_worker"),
            ("compaction_worker", "compaction_worker"),
            ("forget", "forget"),
        ]
    }
    config = {"dependencies": ["."], "graphs": graphs}
    (folder / "langgraph.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.server
def test_deferred_extraction_on_langgraph_dev_uses_the_roots_extraction_prompt(
    tmp_path: Path,
) -> None:
    folder = served_folder(tmp_path / "served")
    context = {"user_id": f"u-{uuid.uuid4().hex[:8]}"}
    log = tmp_path / "langgraph-dev.log"
    with (
        dev_server(folder, server_env(), log, "--config", "langgraph.json") as url,
        get_sync_client(url=url, api_key=None, timeout=RUN_TIMEOUT) as client,
    ):
        thread_id = str(client.threads.create()["thread_id"])
        result = client.runs.wait(
            thread_id,
            "ctxgraph",
            input={"messages": [{"role": "user", "content": "I mainly do Python backend work."}]},
            context=context,
        )
        assert isinstance(result, dict) and result["messages"][-1]["type"] == "ai", result
        assert not (folder / "prompts").exists()  # deferred: the run extracted nothing

        done = client.runs.wait(None, "memory_worker", input={"force": True})
        assert isinstance(done, dict) and done["threads"] == [thread_id], done

    prompts = (folder / "prompts").read_text(encoding="utf-8").splitlines()
    assert prompts and all(RULE in prompt for prompt in prompts), prompts
