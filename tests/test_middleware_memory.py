"""Long-term memory through ``create_agent``: a fact said in one thread is recalled in another.

On the embedded Postgres, with inline extraction: the run that hears the fact stores it
in the user's memory before it returns, and the first request of the user's next thread
carries it; another user's thread never does.
"""

from __future__ import annotations

import uuid

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_memory
from ctxgraph.state.messages import message_origin
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.persistence.connection import Persistence
from tests.support.agents import config, session_agent
from tests.support.scripted import demo_summarizer, prompt_text

FACT = "I usually write code in Rust, with no unsafe blocks."
SETTINGS = Settings(memory_extraction="inline")


def memory_text(request: list[BaseMessage]) -> str:
    """The text of the request's memory message ("" without one)."""
    found = [m.text for m in request if message_origin(m) == "memory"]
    assert len(found) <= 1
    return found[0] if found else ""


def test_a_fact_from_one_thread_is_in_the_next_threads_request(persistence: Persistence) -> None:
    user = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")
    other = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")
    main = ScriptedChatModel(responder=lambda _: AIMessage("Sure."))
    memory = ScriptedChatModel(responder=lambda request: demo_memory(prompt_text(request)))
    models = Models(main=main, summary=demo_summarizer(), memory=memory)
    agent = session_agent(
        main, SETTINGS, persistence.checkpointer, persistence.store, models=models
    )
    first, second, foreign = (f"t-{uuid.uuid4().hex[:8]}" for _ in range(3))

    said = HumanMessage(f"Hello. {FACT}", id="m1")
    agent.invoke({"messages": [said]}, config(first), context=user)
    assert memory.calls == 1
    assert FACT in prompt_text(memory.requests[0])  # the extraction read the turn
    facts = MemoryRepository(persistence.store).list_facts(user)
    assert [fact.content for fact in facts] == [FACT]
    assert memory_text(main.requests[0]) == ""  # nothing was known before

    ask = HumanMessage("Write a small function that parses a date.", id="m2")
    agent.invoke({"messages": [ask]}, config(second), context=user)
    request = main.requests[-1]
    assert FACT in memory_text(request)
    # A fresh thread: the fact came from the user's memory, not from the window.
    assert [m for m in request if FACT in m.text and message_origin(m) != "memory"] == []

    agent.invoke({"messages": [ask]}, config(foreign), context=other)
    assert FACT not in memory_text(main.requests[-1])
    assert MemoryRepository(persistence.store).list_facts(other) == []
