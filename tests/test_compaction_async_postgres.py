"""Compaction on the async Postgres checkpointer and store, as a LangGraph server runs it."""

from __future__ import annotations

from ctxgraph.graph import build_graph
from ctxgraph.state import Context, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.store.persistence.archive import ThreadArchive, averify_thread
from ctxgraph.store.persistence.connection import open_async_persistence


async def test_async_postgres_session_compacts_and_reads_history_back(
    database_uri: str, thread_id: str
) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    context = Context(user_id="u1")
    settings = Settings(trigger_messages=10, keep_messages=4)
    async with open_async_persistence(database_uri) as persistence:
        graph = build_graph(
            models=demo_models(),
            tools=demo_tools(),
            settings=settings,
            checkpointer=persistence.checkpointer,
            store=persistence.store,
        )
        for turn in range(12):
            await graph.ainvoke(
                {"messages": [("user", f"What is {turn} * 7? Note order B-{2000 + turn}.")]},
                config,
                context=context,
            )
        state = (await graph.aget_state(config)).values
        mark = state["compaction"]
        report = await averify_thread(persistence.store, thread_id, mark)
        records = await ThreadArchive(persistence.store, thread_id).arecords()

    assert mark["version"] >= 2
    assert report.ok, report.reason
    assert [r["version"] for r in records] == list(range(1, mark["version"] + 1))
    archived = [m["data"]["content"] for r in records for m in r["messages"]]
    assert "What is 0 * 7? Note order B-2000." in archived
    assert "B-2000" in state["summary"]["ledger"]["identifiers"]
    # Every folded calculator call is in the ledger, listed or counted.
    ledger = state["summary"]["ledger"]
    folded_calls = {
        call["id"]
        for r in records
        for m in r["messages"]
        for call in m["data"].get("tool_calls") or []
    }
    listed = {e["id"] for e in ledger["tool_calls"] if e["status"] == "succeeded"}
    assert folded_calls
    assert len(listed & folded_calls) + ledger["aggregated"].get("calculator", 0) == len(
        folded_calls
    )
