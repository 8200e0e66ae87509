"""``forget`` on ``langgraph dev`` with custom auth: the owner, another user, an operator.

One server (the auth test's config, which serves the ``forget`` graph) for every case;
alice chats turns holding codes, then forgets them through the SDK.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from langgraph_sdk.client import SyncLangGraphClient

from ctxgraph.graph.server_states import quiet_node, reducer_channels
from ctxgraph.store.redaction import REDACTION_MARKER
from tests.test_server_auth import ask, clients, refused, server_url

__all__ = ["clients", "server_url"]

Clients = Callable[[str], SyncLangGraphClient]

FORGET = "forget"


def turn(code: str) -> str:
    return f"I prefer quiet hotels near a train station; my booking code is {code}."


def chat(client: SyncLangGraphClient, code: str) -> str:
    thread_id = str(client.threads.create()["thread_id"])
    ask(client, thread_id, turn(code), {})
    return thread_id


def forget(client: SyncLangGraphClient, **payload: Any) -> dict[str, Any]:
    result = client.runs.wait(None, FORGET, input=payload)
    assert isinstance(result, dict), result
    return result


def receipt_of(client: SyncLangGraphClient, **payload: Any) -> dict[str, Any]:
    result = forget(client, **payload)
    assert "receipt" in result, result
    receipt: dict[str, Any] = result["receipt"]
    return receipt


def dumped(value: object) -> str:
    return json.dumps(value, default=str)


def memory_of(client: SyncLangGraphClient, user: str) -> str:
    return dumped(client.store.search_items(["memory", user], limit=100)["items"])


def snapshot(client: SyncLangGraphClient, thread_id: str) -> tuple[object, object]:
    state = client.threads.get_state(thread_id)
    return state["values"], [s["checkpoint"] for s in client.threads.get_history(thread_id)]


@pytest.mark.server
def test_owner_forgets_a_text_everywhere(clients: Clients) -> None:
    alice = clients("alice-token")
    code = "4417-2209"
    thread_id = chat(alice, code)
    before = alice.threads.get_state(thread_id)
    ids = [m["id"] for m in before["values"]["messages"]]
    assert code in dumped(before["values"]) and len(alice.threads.get_history(thread_id)) > 2

    dry = receipt_of(alice, text=code, dry_run=True)
    assert dry["dry_run"] and dry["places"], dry
    assert code in dumped(alice.threads.get_state(thread_id)["values"])

    receipt = receipt_of(alice, text=code)
    kinds = {place["kind"] for place in receipt["places"]}
    assert {"thread window", "older checkpoints"} <= kinds, receipt
    assert all(code not in place["where"] for place in receipt["places"])
    assert receipt["subject"] == "alice" and receipt["total"] >= 2

    after = alice.threads.get_state(thread_id)
    assert code not in dumped(after["values"])
    assert REDACTION_MARKER in dumped(after["values"]["messages"])
    assert [m["id"] for m in after["values"]["messages"]] == ids
    assert after["next"] == []
    history = alice.threads.get_history(thread_id, limit=100)
    assert history[0]["checkpoint"]["checkpoint_id"] == after["checkpoint"]["checkpoint_id"]
    assert all(code not in dumped(state["values"]) for state in history)
    assert len(history) <= 2, [s["metadata"].get("source") for s in history]
    assert code not in memory_of(alice, "alice")
    assert alice.threads.get(thread_id)["metadata"]["owner"] == "alice"
    # The thread goes on from the redacted head.
    assert ask(alice, thread_id, "Thanks!", {})
    assert alice.threads.get_state(thread_id)["next"] == []
    # Nothing is left to find: a second forget is empty.
    assert receipt_of(alice, text=code, dry_run=True)["places"] == []


@pytest.mark.server
def test_another_user_cannot_forget_for_alice(clients: Clients) -> None:
    alice, bob = clients("alice-token"), clients("bob-token")
    code = "7730-5521"
    thread_id = chat(alice, code)
    state, memory = snapshot(alice, thread_id), memory_of(alice, "alice")
    assert refused(lambda: forget(bob, text=code, user_id="alice")) == 403
    assert refused(lambda: forget(bob, text=code, thread_id=thread_id)) == 403
    # A run on a thread is refused too, even on one's own.
    own = str(bob.threads.create()["thread_id"])
    assert refused(lambda: bob.runs.wait(own, FORGET, input={"text": code})) == 403
    # Bob's own forget searches bob's data only.
    assert receipt_of(bob, text=code)["places"] == []
    assert snapshot(alice, thread_id) == state
    assert memory_of(alice, "alice") == memory


@pytest.mark.server
def test_operator_forgets_for_alice(clients: Clients) -> None:
    alice, ops = clients("alice-token"), clients("ops-token")
    code = "9052-6618"
    thread_id = chat(alice, code)
    receipt = receipt_of(ops, text=code, user_id="alice", thread_id=thread_id)
    assert receipt["subject"] == "alice" and receipt["places"], receipt
    assert code not in dumped(alice.threads.get_state(thread_id)["values"])
    assert alice.threads.get(thread_id)["metadata"]["owner"] == "alice"
    assert code not in memory_of(alice, "alice")


@pytest.mark.server
def test_a_bad_request_fails_the_run_with_its_message(clients: Clients) -> None:
    alice = clients("alice-token")
    for payload, message in (
        ({}, "ForgetError: give exactly one of a fact key or a text"),
        ({"fact": "no-such-key"}, "ForgetError: no fact with key 'no-such-key'"),
        ({"text": "ab"}, "RedactionError"),
    ):
        with pytest.raises(Exception, match=message):  # the SDK raises the run's error
            forget(alice, **payload)


# --- without a server --------------------------------------------------------------


def test_the_quiet_node_leads_only_to_end() -> None:
    drawn = {
        "nodes": [{"id": n} for n in ("__start__", "model", "extract_memory", "__end__")],
        "edges": [
            {"source": "__start__", "target": "model"},
            {"source": "model", "target": "__end__", "conditional": True},
            {"source": "model", "target": "extract_memory", "conditional": True},
            {"source": "extract_memory", "target": "__end__"},
        ],
    }
    assert quiet_node(drawn) == "extract_memory"
    drawn["edges"] = drawn["edges"][:3]
    assert quiet_node(drawn) is None


def test_reducer_channels_of_the_agent_state() -> None:
    assert reducer_channels() == {
        "messages",
        "compaction_retry",
        "skill_context",
        "delegations",
        "model_usage",
        "tools_unlocked",
    }
