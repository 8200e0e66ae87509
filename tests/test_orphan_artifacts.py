"""Artifacts stored by a step that never committed are removed later; referenced ones stay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.nodes.offload.orphans import ORPHAN_GRACE, OrphanSweep, mentioned_refs
from ctxgraph.nodes.offload.refs import OFFLOAD_KEY
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.summary import CHAIN_SEED
from ctxgraph.store.artifacts import ArtifactStore
from ctxgraph.store.persistence.archive import ThreadArchive, build_record
from ctxgraph.store.persistence.connection import Persistence
from tests.support.scripted import demo_summarizer

THREAD = "t-orphans"
BIG = "x" * 2_000_000
"""A ~2 MB tool result, as a crashed offload leaves it."""
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


def stored_long_ago(store: InMemoryStore, call_id: str, content: str = BIG) -> str:
    """Store a tool result as a step that crashed before its checkpoint: nothing refers to it."""
    artifacts = ArtifactStore(store, THREAD, clock=lambda: LONG_AGO)
    return artifacts.put("tool_result", content, source_id=call_id, tool_name="fetch").ref


def refs_of(store: InMemoryStore) -> set[str]:
    return {artifact.ref for artifact in ArtifactStore(store, THREAD).list()}


def test_an_old_unreferenced_artifact_is_removed_with_its_chunks() -> None:
    store = InMemoryStore()
    orphan = stored_long_ago(store, "crashed-call")
    assert ArtifactStore(store, THREAD).get(orphan) is not None

    removed = OrphanSweep().sweep(ArtifactStore(store, THREAD), {"messages": []})

    assert removed == [orphan]
    assert refs_of(store) == set()
    assert store.search(("threads", THREAD, "artifacts"), limit=1000) == []


def test_a_fresh_unreferenced_artifact_is_kept_for_a_step_in_flight() -> None:
    store = InMemoryStore()
    fresh = ArtifactStore(store, THREAD).put("tool_result", "y" * 5000, source_id="in-flight")
    assert OrphanSweep().sweep(ArtifactStore(store, THREAD), {"messages": []}) == []
    assert refs_of(store) == {fresh.ref}
    later = ArtifactStore(store, THREAD, clock=lambda: datetime.now(UTC) + 2 * ORPHAN_GRACE)
    assert OrphanSweep().sweep(later, {"messages": []}) == [fresh.ref]


def test_artifacts_referred_to_by_the_state_or_the_archive_are_kept() -> None:
    store = InMemoryStore()
    in_window = stored_long_ago(store, "window-call", "w" * 3000)
    folded_only = stored_long_ago(store, "folded-call", "f" * 3000)
    delegated = stored_long_ago(store, "task-call", "d" * 3000)
    orphan = stored_long_ago(store, "crashed-call")
    folded = [
        HumanMessage("fetch it", id="h1"),
        ToolMessage(
            "[stub]",
            tool_call_id="folded-call",
            id="t1",
            additional_kwargs={OFFLOAD_KEY: {"ref": folded_only, "sha256": "0", "tokens": 1}},
        ),
    ]
    record = build_record(
        version=1,
        messages=folded,
        summary={"schema_version": 1},
        previous_cursor=0,
        previous_chain_hash=CHAIN_SEED,
    )
    ThreadArchive(store, THREAD).put(record)
    state: dict[str, Any] = {
        "messages": [
            ToolMessage(
                "[stub]",
                tool_call_id="window-call",
                id="t2",
                additional_kwargs={OFFLOAD_KEY: {"ref": in_window, "sha256": "0", "tokens": 1}},
            )
        ],
        "delegations": {"entries": [{"id": "task-call", "transcript_ref": delegated}]},
    }

    removed = OrphanSweep().sweep(ArtifactStore(store, THREAD), state)

    assert removed == [orphan]
    assert refs_of(store) == {in_window, folded_only, delegated}


def test_a_sweep_runs_once_per_grace_period_per_thread_unless_forced() -> None:
    store = InMemoryStore()
    sweep = OrphanSweep()
    assert sweep.sweep(ArtifactStore(store, THREAD), {"messages": []}) == []
    orphan = stored_long_ago(store, "crashed-call", "z" * 3000)
    assert sweep.sweep(ArtifactStore(store, THREAD), {"messages": []}) == []
    assert sweep.sweep(ArtifactStore(store, THREAD), {"messages": []}, force=True) == [orphan]


def test_refs_are_found_in_any_value() -> None:
    ref = "art-" + "a" * 24
    assert mentioned_refs({"x": [("see", f"ref {ref}.")], "m": AIMessage(f"[{ref}]")}) == {ref}
    with pytest.raises(ValueError, match="grace"):
        OrphanSweep(grace=timedelta(seconds=-1))


def test_the_next_offload_step_removes_the_artifact_of_a_crashed_step() -> None:
    store, saver = InMemoryStore(), InMemorySaver()
    orphan = stored_long_ago(store, "crashed-call")
    graph = build_graph(
        models=Models(main=ScriptedChatModel(script=["Got it."]), summary=demo_summarizer()),
        settings=Settings(offload_input_tokens=2_000, memory_extraction="off", memory_mode="off"),
        checkpointer=saver,
        store=store,
    )
    paste = "\n".join(f"{i:05d} the quick brown fox jumps over the lazy dog" for i in range(800))

    result = graph.invoke(
        {"messages": [HumanMessage(paste, id="paste-1")]},
        {"configurable": {"thread_id": THREAD}},
        context=Context(user_id="u1"),
    )

    [shown] = [m for m in result["messages"] if m.id == "paste-1"]
    kept = shown.additional_kwargs[OFFLOAD_KEY]["ref"]
    assert refs_of(store) == {kept}  # the paste's artifact, written by this step, stays
    assert orphan not in refs_of(store)


def test_on_postgres_the_next_step_removes_a_crashed_steps_artifact(
    persistence: Persistence, thread_id: str
) -> None:
    store = persistence.store
    crashed = ArtifactStore(store, thread_id, clock=lambda: LONG_AGO)
    orphan = crashed.put("tool_result", BIG, source_id="crashed-call", tool_name="fetch").ref
    graph = build_graph(
        models=Models(main=ScriptedChatModel(script=["Got it."]), summary=demo_summarizer()),
        settings=Settings(offload_input_tokens=2_000, memory_extraction="off", memory_mode="off"),
        checkpointer=persistence.checkpointer,
        store=store,
    )
    paste = "\n".join(f"{i:05d} the quick brown fox jumps over the lazy dog" for i in range(800))
    result = graph.invoke(
        {"messages": [HumanMessage(paste, id="paste-1")]},
        {"configurable": {"thread_id": thread_id}},
        context=Context(user_id="u1"),
    )
    [shown] = [m for m in result["messages"] if m.id == "paste-1"]
    kept = shown.additional_kwargs[OFFLOAD_KEY]["ref"]
    listed = {artifact.ref for artifact in ArtifactStore(store, thread_id).list()}
    assert listed == {kept}
    assert orphan != kept
