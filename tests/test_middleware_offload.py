"""Offloading through ``create_agent``: a 2 MB tool result becomes a stub the model can page.

On the embedded Postgres: the model never sees the 2 MB, only a short stub with the
artifact's ref; ``read_artifact`` (bound once the thread has an artifact) runs through the
agent's tool node and its pages rebuild the result exactly, while compaction keeps every
request under the trigger as the pages pile up.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from ctxgraph.nodes.offload.refs import OFFLOAD_KEY
from ctxgraph.nodes.offload.stub import MAX_STUB_TOKENS
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel, bound_tool_names
from ctxgraph.state.tokens import TokenCounter, count_text
from ctxgraph.store.artifacts import ArtifactStore
from ctxgraph.store.artifacts.paging import reconstruct
from ctxgraph.store.persistence.connection import Persistence
from tests.support.agents import config, provider_problems, session_agent
from tests.support.scripted import demo_summarizer, tool_call

SETTINGS = Settings(memory_extraction="off")
CTX = Context(user_id="u-offload")
REF = ArtifactStore.ref_for("tool_result", "c-dump")
NEXT = re.compile(r"next offset: (\d+)")


@cache
def access_log() -> str:
    """2 MiB of log lines, the same every time (few tokens a line, so few pages to read)."""
    lines: list[str] = []
    size = 0
    while size < 2 * 1024 * 1024:
        n = len(lines)
        line = f"{n:06d} {'-' * 60} A-{n * 7919 % 100_000:05d} ok"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


@tool
def dump_log() -> str:
    """Dump the access log."""
    return access_log()


def pager(request: list[BaseMessage]) -> AIMessage:
    """Dump the log, then read its artifact page by page to the end."""
    last = request[-1]
    if isinstance(last, HumanMessage):
        return tool_call("dump_log", {}, "c-dump")
    assert isinstance(last, ToolMessage)
    offset = 0 if last.name == "dump_log" else None
    found = NEXT.search(last.text)
    if found and offset is None:
        offset = int(found.group(1))
    if offset is None:
        return AIMessage("I read the whole log.")
    return tool_call("read_artifact", {"ref": REF, "offset": offset, "limit": 1000}, f"p{offset}")


def test_a_2_mb_result_is_a_stub_and_read_artifact_reads_it_back_exactly(
    persistence: Persistence, thread_id: str
) -> None:
    original = access_log()
    assert len(original.encode()) >= 2 * 1024 * 1024
    main = ScriptedChatModel(responder=pager)
    models = Models(main=main, summary=demo_summarizer())
    agent = session_agent(
        main, SETTINGS, persistence.checkpointer, persistence.store, models=models, tools=[dump_log]
    )
    run = {**config(thread_id), "recursion_limit": 2_000}
    result = agent.invoke({"messages": [HumanMessage("Dump the log.", id="h1")]}, run, context=CTX)
    assert result["messages"][-1].text == "I read the whole log."

    # The model saw a stub with the ref, not the 2 MB.
    stub = main.requests[1][-1]
    assert isinstance(stub, ToolMessage) and stub.tool_call_id == "c-dump"
    assert stub.status == "success" and REF in stub.text
    assert count_text(stub.text) <= MAX_STUB_TOKENS
    assert f'read_artifact(ref="{REF}", offset=0, limit=200)' in stub.text
    assert stub.additional_kwargs[OFFLOAD_KEY] == {
        "ref": REF,
        "sha256": hashlib.sha256(original.encode()).hexdigest(),
        "tokens": count_text(original),
    }
    # The readers are bound once there is something to read.
    assert "read_artifact" not in bound_tool_names(main.tool_requests[0])
    assert "read_artifact" in bound_tool_names(main.tool_requests[1])

    # Every page came from the real tool, and together they are the result, exactly.
    pages = [r[-1] for r in main.requests[2:]]
    assert all(isinstance(p, ToolMessage) and p.name == "read_artifact" for p in pages)
    assert all(p.status == "success" and OFFLOAD_KEY not in p.additional_kwargs for p in pages)
    assert len(pages) > 50
    assert reconstruct(p.text for p in pages) == original

    counter = TokenCounter()
    sizes = [
        counter.count_messages(r) + counter.count_tools(t)
        for r, t in zip(main.requests, main.tool_requests, strict=True)
    ]
    assert max(sizes) < SETTINGS.trigger_tokens
    assert [p for r in main.requests if (p := provider_problems(r))] == []
    state = agent.get_state(config(thread_id)).values
    assert state["compaction"]["version"] >= 10  # the pages were folded as they piled up
