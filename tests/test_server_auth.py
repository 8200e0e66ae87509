"""Custom auth on ``langgraph dev``: ``add_handlers`` keeps each user to their own data.

One server, started with a test ``langgraph.json`` whose ``auth`` is
``tests/support/auth_tokens.py`` (alice-token → alice, bob-token → bob, ops-token → an
operator), runs the scripted model; bob tries every way into alice's thread and memory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph_sdk import Auth, get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from ctxgraph.graph import build_graph
from ctxgraph.graph.dev_auth import TokenConfigError, parse_tokens, user_for
from ctxgraph.state import Context, Models
from ctxgraph.state.context import ContextError, check_auth_user
from ctxgraph.state.scripted_model import ScriptedChatModel
from tests.test_langgraph_dev import (
    REPO_ROOT,
    RUN_TIMEOUT,
    dev_server,
    drive_background_compaction,
    message_text,
    server_env,
)

GRAPH = "ctxgraph"
AUTH_MODULE = REPO_ROOT / "tests" / "support" / "auth_tokens.py"
PREFERENCE = "I prefer quiet hotels near a train station."
QUESTION = "What do you remember about me?"


def write_config(folder: Path) -> Path:
    graphs = {
        name: f"{REPO_ROOT / 'ctxgraph' / 'graph' / module}.py:graph"
        for name, module in (
            ("ctxgraph", "agent"),
            ("memory_worker", "memory_worker"),
            ("compaction_worker", "compaction_worker"),
            ("forget", "forget_graph"),
        )
    }
    config = {
        "dependencies": [str(REPO_ROOT)],
        "graphs": graphs,
        "auth": {"path": f"{AUTH_MODULE}:auth"},
        "python_version": "3.11",
    }
    path = folder / "langgraph.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("auth-server")
    write_config(folder)
    with dev_server(
        folder, server_env(), folder / "langgraph-dev.log", "--config", "langgraph.json"
    ) as url:
        yield url


@pytest.fixture(scope="module")
def clients(server_url: str) -> Iterator[Callable[[str], SyncLangGraphClient]]:
    opened: dict[str, SyncLangGraphClient] = {}

    def client(token: str) -> SyncLangGraphClient:
        if token not in opened:
            opened[token] = get_sync_client(
                url=server_url,
                api_key=None,
                headers={"Authorization": f"Bearer {token}"},
                timeout=RUN_TIMEOUT,
            )
        return opened[token]

    yield client
    for each in opened.values():
        each.close()


def ask(client: SyncLangGraphClient, thread_id: str, text: str, context: dict[str, Any]) -> str:
    result = client.runs.wait(
        thread_id, GRAPH, input={"messages": [{"role": "user", "content": text}]}, context=context
    )
    assert isinstance(result, dict), result
    return message_text(result["messages"][-1])


def refused(call: Callable[[], object]) -> int:
    with pytest.raises(httpx.HTTPStatusError) as raised:
        call()
    return raised.value.response.status_code


@pytest.fixture(scope="module")
def alice_thread(clients: Callable[[str], SyncLangGraphClient]) -> str:
    alice = clients("alice-token")
    thread_id = str(alice.threads.create()["thread_id"])
    assert ask(alice, thread_id, PREFERENCE, {"user_id": "alice"}).startswith("Noted")
    return thread_id


@pytest.mark.server
def test_alice_uses_her_thread_and_memory(
    clients: Callable[[str], SyncLangGraphClient], alice_thread: str
) -> None:
    alice = clients("alice-token")
    assert alice.threads.get(alice_thread)["metadata"]["owner"] == "alice"
    # Without a user id in the context, the authenticated identity is the user.
    fresh = str(alice.threads.create()["thread_id"])
    assert "quiet hotels" in ask(alice, fresh, QUESTION, {})
    assert alice.threads.get_state(alice_thread)["values"]["messages"]
    found = alice.store.search_items(["memory", "alice"])["items"]
    assert any("quiet hotels" in str(item["value"]) for item in found)
    assert ["memory", "alice"] in [ns[:2] for ns in alice.store.list_namespaces()["namespaces"]]
    meta = alice.store.get_item(["threads", alice_thread, "meta"], "owner")
    assert meta is not None and meta["value"] == {"user_id": "alice"}


@pytest.mark.server
def test_bob_cannot_reach_alices_thread(
    clients: Callable[[str], SyncLangGraphClient], alice_thread: str
) -> None:
    bob = clients("bob-token")
    assert refused(lambda: bob.threads.get_state(alice_thread)) in (403, 404)
    assert refused(lambda: bob.threads.get(alice_thread)) in (403, 404)
    assert alice_thread not in [t["thread_id"] for t in bob.threads.search(limit=100)]
    assert refused(lambda: bob.runs.list(alice_thread)) in (403, 404)
    message = {"messages": [{"role": "user", "content": QUESTION}]}
    assert refused(lambda: bob.runs.wait(alice_thread, GRAPH, input=message)) in (403, 404)
    assert refused(lambda: bob.threads.update(alice_thread, metadata={"owner": "bob"})) in (
        403,
        404,
    )
    with pytest.raises(httpx.HTTPStatusError) as deleting:
        bob.threads.delete(alice_thread)
    assert deleting.value.response.status_code in (403, 404)
    # Alice's thread is still hers, whole.
    alice = clients("alice-token")
    assert alice.threads.get(alice_thread)["metadata"]["owner"] == "alice"
    assert alice.threads.get_state(alice_thread)["values"]["messages"]


@pytest.mark.server
def test_bob_cannot_reach_alices_memory(
    clients: Callable[[str], SyncLangGraphClient], alice_thread: str
) -> None:
    bob = clients("bob-token")
    listed = bob.store.list_namespaces()["namespaces"]
    assert all(ns[:2] == ["memory", "bob"] for ns in listed), listed
    assert refused(lambda: bob.store.list_namespaces(prefix=["memory", "alice"])) == 403
    assert refused(lambda: bob.store.search_items(["memory", "alice"])) == 403
    assert refused(lambda: bob.store.search_items(["memory"])) == 403
    assert refused(lambda: bob.store.search_items(["threads", alice_thread])) == 403
    assert refused(lambda: bob.store.get_item(["threads", alice_thread, "meta"], "owner")) == 403
    fact = ["memory", "alice", "agents", "default", "facts"]
    assert refused(lambda: bob.store.put_item(fact, "planted", {"content": "x"})) == 403
    assert refused(lambda: bob.store.delete_item(fact, "planted")) == 403
    # Bob's own namespace works.
    bob.store.put_item(["memory", "bob", "notes"], "n1", {"content": "mine"})
    assert bob.store.get_item(["memory", "bob", "notes"], "n1") is not None


@pytest.mark.server
def test_bob_cannot_run_as_alice(clients: Callable[[str], SyncLangGraphClient]) -> None:
    bob = clients("bob-token")
    thread_id = str(bob.threads.create()["thread_id"])
    status = refused(lambda: ask(bob, thread_id, QUESTION, {"user_id": "alice"}))
    assert status == 403
    assert not bob.threads.get_state(thread_id)["values"]
    # As himself, bob has no memory of alice's.
    answer = ask(bob, thread_id, QUESTION, {"user_id": "bob"})
    assert "quiet hotels" not in answer
    assert answer == "I do not remember anything about you yet."


@pytest.mark.server
def test_workers_and_assistants_need_an_operator(
    clients: Callable[[str], SyncLangGraphClient], alice_thread: str
) -> None:
    bob = clients("bob-token")
    assert refused(lambda: bob.runs.wait(None, "memory_worker", input={"force": True})) == 403
    job = {"thread_id": alice_thread, "folded": [{"type": "human", "data": {"content": "x"}}]}
    assert refused(lambda: bob.runs.wait(None, "compaction_worker", input=job)) == 403
    assert refused(lambda: bob.assistants.create("ctxgraph")) == 403
    assert [a["graph_id"] for a in bob.assistants.search(graph_id=GRAPH)] == [GRAPH]
    ops = clients("ops-token")
    assert alice_thread in [t["thread_id"] for t in ops.threads.search(limit=100)]
    assert ops.runs.wait(None, "memory_worker", input={"force": True}) is not None
    assert ops.store.search_items(["memory", "alice"])["items"]


@pytest.mark.server
def test_requests_without_a_known_token_are_refused(server_url: str) -> None:
    for headers in ({}, {"Authorization": "Bearer nobody"}, {"Authorization": "alice-token"}):
        answer = httpx.post(
            f"{server_url}/threads/search", json={}, headers=headers, trust_env=False
        )
        assert answer.status_code == 401, (headers, answer.text)


@pytest.mark.server
def test_background_compaction_runs_as_the_owner(
    clients: Callable[[str], SyncLangGraphClient],
) -> None:
    alice = clients("alice-token")
    thread_id, events = drive_background_compaction(alice, GRAPH, {"user_id": "alice"})
    assert events[:1] == ["compaction.queued"], events
    assert "compaction.applied" in events, events
    assert alice.threads.get_state(thread_id)["values"]["compaction"]["version"] == 1


# --- without a server --------------------------------------------------------------


def test_graph_refuses_a_context_naming_another_user() -> None:
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=ScriptedChatModel(script=["hi"])),
    )
    config: Any = {
        "configurable": {
            "thread_id": "t-1",
            "langgraph_auth_user": {"identity": "bob"},
            "langgraph_auth_user_id": "bob",
        }
    }
    with pytest.raises(ContextError, match="'alice' is not the authenticated user 'bob'"):
        graph.invoke({"messages": [HumanMessage("hi")]}, config, context=Context(user_id="alice"))
    assert graph.get_state(config).values == {}
    # Without an authenticated user nothing changes.
    context = Context(user_id="alice")
    assert check_auth_user(context, {"configurable": {"langgraph_auth_user_id": ""}}) is context
    assert check_auth_user(context, None) is context


def test_dev_auth_tokens() -> None:
    users = parse_tokens("t1:alice, t2:bob,t3:ops:operator")
    assert users["t1"] == {"identity": "alice", "permissions": []}
    assert users["t3"] == {"identity": "ops", "permissions": ["ctxgraph:operator"]}
    with pytest.raises(TokenConfigError, match="entry 1"):
        parse_tokens("secret:alice:admin")
    environ = {"CTXGRAPH_AUTH_TOKENS": "t1:alice"}
    assert user_for("Bearer t1", environ)["identity"] == "alice"
    for header in (None, "t1", "Bearer t2"):
        with pytest.raises(Auth.exceptions.HTTPException) as raised:
            user_for(header, environ)
        assert raised.value.status_code == 401
    with pytest.raises(Auth.exceptions.HTTPException, match="no token is configured"):
        user_for("Bearer t1", {})


def test_example_deployment_points_at_its_auth() -> None:
    folder = REPO_ROOT / "examples" / "auth"
    config = json.loads((folder / "langgraph.json").read_text(encoding="utf-8"))
    assert config["auth"] == {"path": "./auth.py:auth"}
    for target in config["graphs"].values():
        assert (folder / target.split(":")[0]).resolve().is_file(), target
    assert (folder / "auth.py").is_file()


JS_CHECK = REPO_ROOT / "tests" / "js"


def _js_sdk_ready() -> bool:
    return shutil.which("node") is not None and (JS_CHECK / "node_modules").is_dir()


@pytest.mark.server
@pytest.mark.skipif(
    not _js_sdk_ready(),
    reason="node or the JS SDK is missing (.ci/run installs it: npm ci in tests/js)",
)
def test_bob_cannot_reach_alices_thread_through_the_js_sdk(
    server_url: str, alice_thread: str
) -> None:
    completed = subprocess.run(
        ["node", str(JS_CHECK / "bob_tries_alice.mjs"), server_url, alice_thread],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["getState"] in (403, 404), result
    assert result["searchListsIt"] is False, result
    assert result["memory"] == 403, result
    assert result["runAsAlice"] == 403, result
    assert result["anonymous"] == 401, result
