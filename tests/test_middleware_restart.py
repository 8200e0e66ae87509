"""A ``create_agent`` thread goes on in a new process: new connections, model and middleware.

The new host knows nothing of the old one; the thread's summary, mark and archive come
from Postgres. Without ``Models`` the host learns the agent's model at its first call,
so a thread already over the trigger compacts inside that call, before the model reads
the request; later compactions run before the model call, and the archive verifies.
"""

from __future__ import annotations

from typing import Any

from ctxgraph.state import Context, Settings
from ctxgraph.state.messages import message_origin
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.persistence.archive import verify_thread
from ctxgraph.store.persistence.connection import Persistence, open_persistence
from tests.support.agents import (
    archived,
    config,
    message_key,
    provider_problems,
    session_agent,
    session_keys,
    session_reply,
    user_turn,
)
from tests.support.scripted import Dispatch, is_summary_request, main_requests

CTX = Context(user_id="u-restart")
BEFORE = Settings(trigger_messages=20, keep_messages=6, memory_extraction="off")
AFTER = Settings(trigger_messages=12, keep_messages=4, memory_extraction="off")
"""The new process runs with a lower trigger, which the thread is already over."""


def compacting_nodes(agent: Any, n: int, thread_id: str) -> list[str]:
    """Run user turn ``n``; the agent's nodes whose update moved the compaction mark."""
    found: list[str] = []
    for update in agent.stream(user_turn(n), config(thread_id), context=CTX, stream_mode="updates"):
        for node, value in update.items():
            writes = value if isinstance(value, list) else [value]
            if any(isinstance(w, dict) and "compaction" in w for w in writes):
                found.append(node)
    return found


def test_a_new_process_compacts_at_its_first_call_and_the_archive_verifies(
    persistence: Persistence, database_uri: str, thread_id: str
) -> None:
    old_model = ScriptedChatModel(responder=Dispatch(session_reply))
    old = session_agent(old_model, BEFORE, persistence.checkpointer, persistence.store)
    for n in range(1, 8):
        old.invoke(user_turn(n), config(thread_id), context=CTX)
    state = old.get_state(config(thread_id)).values
    assert state["compaction"]["version"] == 1
    assert len(state["messages"]) + 1 >= AFTER.trigger_messages
    intent = state["summary"]["session_intent"]

    with open_persistence(database_uri) as reopened:
        new_model = ScriptedChatModel(responder=Dispatch(session_reply))
        new = session_agent(new_model, AFTER, reopened.checkpointer, reopened.store)
        assert compacting_nodes(new, 8, thread_id) == ["model"]

        # The first call compacted before the model read anything, building on the
        # summary the old process wrote.
        summary_request = new_model.requests[0]
        assert is_summary_request(summary_request)
        shown = [m.text for m in summary_request if message_origin(m) == "summary"]
        assert len(shown) == 1 and intent in shown[0]
        first = main_requests(new_model)[0]
        assert message_origin(first[0]) == "summary"
        assert len(first) < AFTER.trigger_messages
        assert new.get_state(config(thread_id)).values["compaction"]["version"] == 2

        later = [node for n in range(9, 21) for node in compacting_nodes(new, n, thread_id)]
        assert len(later) >= 3 and set(later) == {"CompactionMiddleware.before_model"}
        state = new.get_state(config(thread_id)).values
        mark = state["compaction"]
        assert mark["version"] >= 5
        requests = main_requests(new_model)
        assert max(len(request) for request in requests) < AFTER.trigger_messages
        requests += main_requests(old_model)
        assert [problems for r in requests if (problems := provider_problems(r))] == []

        folded = archived(reopened.store, thread_id)
        window = list(state["messages"])
        assert [message_key(m) for m in folded + window] == session_keys(range(1, 21))
        report = verify_thread(reopened.store, thread_id, mark)
        assert report.ok, report
        assert report.versions_checked == mark["version"]
