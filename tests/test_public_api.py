"""The public names other graphs and tests rely on are importable where they are promised."""

from __future__ import annotations

import inspect


def test_the_promised_imports_and_signatures() -> None:
    from ctxgraph.graph import build_graph
    from ctxgraph.nodes.compaction import partition_history
    from ctxgraph.nodes.memory import filter_for_memory, render_memory
    from ctxgraph.state import Context, Models, Settings
    from ctxgraph.state.summary import checksum
    from ctxgraph.store.memory import FactCandidate, MemoryRepository, accept_candidate
    from ctxgraph.store.search import final_score

    assert list(inspect.signature(build_graph).parameters) == [
        "checkpointer",
        "store",
        "models",
        "tools",
        "settings",
        "parts",
        "deprecated",
    ]
    assert list(inspect.signature(render_memory).parameters) == [
        "profile",
        "facts",
        "mode",
        "budget",
        "correction_budget",
        "top_n",
        "query",
        "ranked",
    ]
    search = inspect.signature(MemoryRepository.search).parameters
    assert list(search)[:5] == ["self", "context", "query", "top_k", "now"]
    assert search["top_k"].default == 5
    add = inspect.signature(MemoryRepository.add_fact).parameters
    assert (add["category"].default, add["confidence"].default) == ("context", 0.9)
    assert list(inspect.signature(final_score).parameters) == [
        "raw_bm25",
        "confidence",
        "created_at",
        "now",
    ]
    settings = Settings()
    assert (settings.memory_mode, settings.memory_budget, settings.correction_budget) == (
        "auto",
        2_000,
        500,
    )
    assert (settings.trigger_tokens, settings.trigger_messages, settings.keep_messages) == (
        18_000,
        60,
        8,
    )
    context = Context(user_id="u")
    assert (context.agent_name, context.project_id) == ("default", None)
    assert list(inspect.signature(partition_history).parameters) == ["messages", "keep"]
    assert next(iter(inspect.signature(filter_for_memory).parameters)) == "messages"
    assert list(inspect.signature(checksum).parameters) == ["summary", "cursor", "event_ids"]
    assert next(iter(inspect.signature(accept_candidate).parameters)) == "candidate"
    assert list(inspect.signature(Models).parameters) == ["main", "summary", "memory"]
    assert {"key", "content", "category", "scope", "confidence"} <= set(FactCandidate.model_fields)


def test_the_package_root_exports_the_main_names() -> None:
    import inspect

    import ctxgraph
    from ctxgraph import Context, MemoryRepository, Models, Settings, build_graph, create_builder
    from ctxgraph.graph.builder import build_graph as built_in_builder
    from ctxgraph.state.context import Context as ContextClass
    from ctxgraph.store.persistence import open_async_persistence, open_persistence

    assert build_graph is built_in_builder
    assert Context is ContextClass
    exported = {"build_graph", "create_builder", "Context", "Models", "Settings"}
    assert exported | {"MemoryRepository", "__version__"} <= set(ctxgraph.__all__)
    assert ctxgraph.__version__.count(".") == 2
    assert callable(create_builder) and callable(open_persistence)
    assert callable(open_async_persistence)
    assert MemoryRepository.__name__ == "MemoryRepository"
    from ctxgraph import SubagentSpec
    from ctxgraph.state.subagents import SubagentSpec as SpecClass

    assert SubagentSpec is SpecClass and "SubagentSpec" in ctxgraph.__all__
    assert list(inspect.signature(SubagentSpec).parameters) == [
        "name",
        "description",
        "system_prompt",
        "tools",
        "model",
    ]
    assert Models.__name__ == "Models" and Settings.__name__ == "Settings"


def test_an_unknown_name_is_a_clear_attribute_error() -> None:
    import pytest

    import ctxgraph

    with pytest.raises(AttributeError, match="no attribute 'build_grpah'"):
        _ = ctxgraph.build_grpah  # type: ignore[attr-defined]


def test_the_forgetting_entry_points_keep_their_signatures() -> None:
    from ctxgraph.store.forget import aforget, forget
    from ctxgraph.store.memory import export_bundle, import_bundle
    from ctxgraph.store.user_deletion import adelete_user, delete_user

    for function in (forget, aforget):
        parameters = inspect.signature(function).parameters
        assert list(parameters)[:3] == ["store", "checkpointer", "user_id"]
        assert {"fact", "text", "thread_id", "dry_run", "lock"} <= set(parameters)
        assert parameters["dry_run"].default is False
    for function in (delete_user, adelete_user):
        parameters = inspect.signature(function).parameters
        assert list(parameters)[:3] == ["store", "checkpointer", "user_id"]
        assert parameters["dry_run"].default is False
    assert list(inspect.signature(export_bundle).parameters)[:2] == ["store", "context"]
    assert list(inspect.signature(import_bundle).parameters)[:3] == ["store", "bundle", "user_id"]
