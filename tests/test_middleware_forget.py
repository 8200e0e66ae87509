"""``forget`` on a ``create_agent`` thread: the text is left in no row of the database.

A phone number reaches every place a ctxgraph middleware thread keeps data: a memory
fact (inline extraction), the archive (the thread compacts), an offloaded tool result,
and the agent's checkpoints. ``forget`` finds the thread through the owner the middleware
recorded; afterwards no row of any table holds the number, the archive still verifies
with the redaction listed, and the thread runs on without the model seeing the number.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_memory
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.forget import forget
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.persistence.archive import verify_thread
from ctxgraph.store.persistence.connection import Persistence, open_persistence
from ctxgraph.store.redaction import REDACTION_MARKER
from tests.support.agents import config, session_agent
from tests.support.scripted import demo_summarizer, prompt_text, tool_call
from tests.support.table_scan import rows_holding

USER = Context(user_id="zed")
NUMBER = "555-0199"
STATEMENT = f"I usually take calls on {NUMBER}."
SETTINGS = Settings(
    trigger_messages=8, keep_messages=2, offload_tokens=500, memory_extraction="inline"
)


@tool
def contact_sheet() -> str:
    """The team's contact sheet."""
    rows = [f"{i:04d} desk line: extension {i}" for i in range(200)]
    rows[100] = f"0100 Zed's direct line is {NUMBER}"  # in the middle: not in the stub
    return "\n".join(rows)


def reply(request: list[BaseMessage]) -> AIMessage:
    """Open the contact sheet when asked, else acknowledge."""
    last = request[-1]
    if isinstance(last, HumanMessage) and "contact sheet" in last.text:
        return tool_call("contact_sheet", {}, f"c-{last.id}")
    return AIMessage("Noted.")


@pytest.fixture
def fresh(new_database: str) -> Iterator[tuple[Persistence, str]]:
    """A database of this test's own, so a scan of every table sees only this test's rows."""
    with open_persistence(new_database) as opened:
        yield opened, new_database


def test_forget_leaves_the_text_in_no_row_and_the_thread_verifiable(
    fresh: tuple[Persistence, str], thread_id: str
) -> None:
    persistence, uri = fresh
    main = ScriptedChatModel(responder=reply)
    memory = ScriptedChatModel(responder=lambda request: demo_memory(prompt_text(request)))
    models = Models(main=main, summary=demo_summarizer(), memory=memory)
    agent = session_agent(
        main,
        SETTINGS,
        persistence.checkpointer,
        persistence.store,
        models=models,
        tools=[contact_sheet],
    )
    turns = [STATEMENT, "Open the contact sheet.", *(f"Next task {n}." for n in range(6))]
    for n, text in enumerate(turns):
        agent.invoke(
            {"messages": [HumanMessage(text, id=f"h{n}")]}, config(thread_id), context=USER
        )

    state = agent.get_state(config(thread_id)).values
    assert state["compaction"]["version"] >= 1
    offloaded = [
        m for m in main.requests[2] if isinstance(m, ToolMessage) and m.name == "contact_sheet"
    ]
    assert offloaded and NUMBER not in offloaded[0].text  # the model saw the stub
    facts = MemoryRepository(persistence.store).list_facts(USER)
    assert [fact.content for fact in facts] == [STATEMENT]
    before = rows_holding(uri, NUMBER)
    assert {"store", "checkpoint_blobs"} <= set(before), before

    receipt = forget(persistence.store, persistence.checkpointer, USER.user_id, text=NUMBER)

    kinds = {place.kind for place in receipt.places}
    assert {"memory fact", "archive record", "artifact"} <= kinds, kinds
    assert rows_holding(uri, NUMBER) == {}
    assert MemoryRepository(persistence.store).list_facts(USER) == []
    mark = agent.get_state(config(thread_id)).values["compaction"]
    report = verify_thread(persistence.store, thread_id, mark)
    assert report.ok, report
    assert [note.receipt for note in report.redactions] == [receipt.id]

    seen = len(main.requests)
    agent.invoke(
        {"messages": [HumanMessage("Which number?", id="h9")]}, config(thread_id), context=USER
    )
    requests = main.requests[seen:]
    assert requests and all(NUMBER not in m.text for r in requests for m in r)
    assert any(REDACTION_MARKER in m.text for r in requests for m in r)
