"""The deferred-extraction worker: processing, quiet period, crash recovery and its graph."""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph.memory_worker import WorkerStoreError, build_worker_graph
from ctxgraph.nodes.memory.extract import MemoryExtractor
from ctxgraph.nodes.memory.worker import process_pending, worker_from_env
from ctxgraph.state.context import Context
from ctxgraph.state.models import ModelConfigError, Models
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.progress import ProcessedMessages
from ctxgraph.store.memory.queue import MemoryQueue
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.namespaces import memory_queue
from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import REPO_ROOT, run_ctxgraph

SENTENCE = "I mainly do Python backend work."
ROWS = [
    {"id": "m-user-1", "role": "user", "content": f"Hi! {SENTENCE} Can you help me?"},
    {"id": "m-ai-1", "role": "assistant", "content": "Sure, happy to help."},
]


def _update_call() -> AIMessage:
    fact: dict[str, Any] = {
        "key": "work_focus",
        "content": "Mainly does Python backend work.",
        "category": "context",
        "scope": "user",
        "durability": "durable",
        "authority": "descriptive",
        "confidence": 0.9,
        "evidence_message_id": "m-user-1",
        "evidence_text": SENTENCE,
    }
    return AIMessage(
        content="",
        tool_calls=[
            {
                "name": "MemoryUpdate",
                "args": {"facts": [fact], "profile_updates": []},
                "id": "call_memory_1",
            }
        ],
    )


def _context() -> Context:
    return Context(user_id=f"u-{uuid.uuid4().hex[:10]}", agent_name="coder")


def test_process_pending_stores_facts_and_empties_the_queue() -> None:
    store = InMemoryStore()
    context = _context()
    MemoryQueue(store).enqueue("t-1", context, ROWS)
    model = ScriptedChatModel(script=[_update_call()])

    done = process_pending(store, MemoryExtractor(model), threshold=0.7, quiet_seconds=0)

    assert [(item.thread_id, [f.key for f in result.stored]) for item, result in done] == [
        ("t-1", ["work_focus"])
    ]
    facts = MemoryRepository(store).list_facts(context)
    assert [(f.key, f.content, f.source_thread) for f in facts] == [
        ("work_focus", "Mainly does Python backend work.", "t-1")
    ]
    assert MemoryQueue(store).due(quiet_seconds=0) == []
    assert ProcessedMessages(store, "t-1").get() == ["m-user-1", "m-ai-1"]
    assert model.calls == 1


def test_a_failing_extraction_stays_queued(caplog: pytest.LogCaptureFixture) -> None:
    store = InMemoryStore()
    context = _context()
    MemoryQueue(store).enqueue("t-fail", context, ROWS)
    model = ScriptedChatModel(script=[RuntimeError("provider is down"), _update_call()])
    extractor = MemoryExtractor(model)

    with caplog.at_level("WARNING", logger="ctxgraph.memory"):
        assert process_pending(store, extractor, threshold=0.7, quiet_seconds=0) == []
    assert "t-fail" in caplog.text
    assert "provider is down" in caplog.text
    assert [item.thread_id for item in MemoryQueue(store).due(quiet_seconds=0)] == ["t-fail"]
    assert MemoryRepository(store).list_facts(context) == []
    assert ProcessedMessages(store, "t-fail").get() == []

    # The next run retries it and nothing was lost.
    done = process_pending(store, extractor, threshold=0.7, quiet_seconds=0)
    assert [item.thread_id for item, _ in done] == ["t-fail"]
    assert [f.key for f in MemoryRepository(store).list_facts(context)] == ["work_focus"]
    assert MemoryQueue(store).due(quiet_seconds=0) == []


def test_quiet_period() -> None:
    store = InMemoryStore()
    now = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
    MemoryQueue(store).enqueue("t-quiet", _context(), ROWS, now=now - timedelta(seconds=5))
    queue = MemoryQueue(store)

    assert queue.due(quiet_seconds=30, now=now) == []
    assert [item.thread_id for item in queue.due(quiet_seconds=0, now=now)] == ["t-quiet"]

    model = ScriptedChatModel(script=[_update_call()])
    extractor = MemoryExtractor(model)
    assert process_pending(store, extractor, threshold=0.7, quiet_seconds=30, now=now) == []
    assert model.calls == 0
    later = now + timedelta(seconds=30)
    done = process_pending(store, extractor, threshold=0.7, quiet_seconds=30, now=later)
    assert [item.thread_id for item, _ in done] == ["t-quiet"]


def test_worker_from_env() -> None:
    extractor, settings = worker_from_env(
        {"CTXGRAPH_MODEL": "scripted", "CTXGRAPH_MEMORY_EXTRACTION": "deferred"}
    )
    assert isinstance(extractor, MemoryExtractor)
    assert settings.memory_extraction == "deferred"
    with pytest.raises(ModelConfigError, match="CTXGRAPH_MODEL"):
        worker_from_env({})


CRASHING_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from ctxgraph.state.context import Context
    from ctxgraph.store.memory.queue import MemoryQueue
    from ctxgraph.store.persistence.connection import open_persistence

    thread_id, user_id, sentence = sys.argv[1:4]
    rows = [
        {"id": "m-crash-1", "role": "user", "content": sentence},
        {"id": "m-crash-2", "role": "assistant", "content": "Noted."},
    ]
    with open_persistence(os.environ["DATABASE_URI"]) as persistence:
        MemoryQueue(persistence.store).enqueue(thread_id, Context(user_id=user_id), rows)
        print("queued", flush=True)
        time.sleep(600)
    """
)


def test_a_queue_left_by_a_killed_process_is_processed_later(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, thread_id: str
) -> None:
    user = f"u-{uuid.uuid4().hex[:10]}"
    child = subprocess.Popen(
        [python, "-c", CRASHING_CHILD, thread_id, user, SENTENCE],
        env=subprocess_env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "queued", child.stderr.read() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL

        store = persistence.store
        assert store.get(memory_queue(), thread_id) is not None, "the queued item was lost"

        result = run_ctxgraph(python, subprocess_env, "memory", "process")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"thread {thread_id}" in result.stdout

        facts = MemoryRepository(store).list_facts(Context(user_id=user))
        assert any(fact.evidence == SENTENCE for fact in facts), facts
        assert any("Python backend" in fact.content for fact in facts), facts
        assert store.get(memory_queue(), thread_id) is None
        assert MemoryQueue(store).due(quiet_seconds=0) == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        persistence.store.delete(memory_queue(), thread_id)  # never leave work for other tests


def test_worker_graph_processes_a_queued_item() -> None:
    store = InMemoryStore()
    context = _context()
    now = datetime.now(UTC)
    MemoryQueue(store).enqueue("t-graph", context, ROWS, now=now)
    model = ScriptedChatModel(script=[_update_call()])
    worker = build_worker_graph(Models(main=model), Settings(), store=store)

    # The item was just queued: without force, the quiet period keeps it waiting.
    assert worker.invoke({}) == {"processed": 0, "threads": [], "stored": 0, "model_usage": {}}
    assert model.calls == 0

    done = worker.invoke({"force": True})
    assert done.pop("model_usage")["memory"]["calls"] == 1
    assert done == {
        "processed": 1,
        "threads": ["t-graph"],
        "stored": 1,
    }
    assert [f.key for f in MemoryRepository(store).list_facts(context)] == ["work_focus"]
    assert MemoryQueue(store).due(quiet_seconds=0) == []


def test_worker_graph_needs_a_store() -> None:
    worker = build_worker_graph(Models(main=ScriptedChatModel()), Settings())
    with pytest.raises(WorkerStoreError, match="needs a Store"):
        worker.invoke({"force": True})


def test_worker_graph_reads_the_model_when_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CTXGRAPH_MODEL", raising=False)
    import ctxgraph.graph.memory_worker as module

    assert module.graph.name == "memory_worker"  # loading never needs a model
    worker = build_worker_graph(store=InMemoryStore())
    with pytest.raises(ModelConfigError, match="CTXGRAPH_MODEL"):
        worker.invoke({"force": True})


def test_langgraph_json_registers_the_worker() -> None:
    config = json.loads((REPO_ROOT / "langgraph.json").read_text())
    assert config["graphs"]["ctxgraph"] == "./ctxgraph/graph/agent.py:graph"
    assert config["graphs"]["memory_worker"] == "./ctxgraph/graph/memory_worker.py:graph"
    assert config["graphs"]["compaction_worker"] == "./ctxgraph/graph/compaction_worker.py:graph"


def test_run_first_processes_due_extractions_left_queued(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, thread_id: str
) -> None:
    user = f"u-{uuid.uuid4().hex[:10]}"
    rows = [{"id": "m-left-1", "role": "user", "content": SENTENCE}]
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    MemoryQueue(persistence.store).enqueue(thread_id, Context(user_id=user), rows, now=long_ago)
    try:
        result = run_ctxgraph(
            python, subprocess_env, "run", "--user", user, "--thread", f"{thread_id}-next", "hi"
        )
        assert result.returncode == 0, result.stderr
        assert "processed 1 pending memory extraction left by an earlier run" in result.stderr
        assert persistence.store.get(memory_queue(), thread_id) is None
        facts = MemoryRepository(persistence.store).list_facts(Context(user_id=user))
        assert any(fact.evidence == SENTENCE for fact in facts), facts
    finally:
        persistence.store.delete(memory_queue(), thread_id)
