"""The checkpointers the persistence hands out pass LangGraph's checkpointer conformance suite.

The suite (``langgraph-checkpoint-conformance``) calls only the async methods (``aput``,
``aget_tuple``, ``alist`` …). ``AsyncPostgresSaver`` is run as it is; ``PostgresSaver``
implements only the sync methods, so it runs through a thin adapter whose async methods
call the sync ones in a worker thread, and a focused round trip checks its sync methods
directly. Everything runs in a schema of its own on the session database, dropped
afterwards, so the suite's threads never meet other tests' data.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    empty_checkpoint,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import sql
from psycopg.conninfo import make_conninfo

from ctxgraph.store.persistence import open_async_persistence, open_persistence


class SyncSaverThroughAsync(BaseCheckpointSaver[str]):
    """Serves the async checkpointer API by calling a sync saver's methods in a thread."""

    def __init__(self, saver: PostgresSaver) -> None:
        super().__init__(serde=saver.serde)
        self.saver = saver

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.saver.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.saver.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.saver.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.saver.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.saver.delete_thread, thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.saver.prune, thread_ids, strategy=strategy)


@pytest.fixture(scope="module")
def conformance_uri(database_uri: str) -> Iterator[str]:
    """The session database with a fresh schema first on the search path."""
    schema = f"conformance_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield make_conninfo(database_uri, options=f"-c search_path={schema}")
    finally:
        with psycopg.connect(database_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _passed(report: CapabilityReport) -> bool:
    if not report.passed_all_base():
        report.print_report()
        for name, result in sorted(report.results.items()):
            for failure in result.failures:
                print(f"{name}: {failure}")
    return report.passed_all_base()


def _detected(report: CapabilityReport) -> set[str]:
    return {name for name, result in report.results.items() if result.detected}


BASE = {"put", "put_writes", "get_tuple", "list", "delete_thread"}


async def test_async_saver_from_open_async_persistence_conforms(conformance_uri: str) -> None:
    async def factory() -> AsyncGenerator[BaseCheckpointSaver[str], None]:
        async with open_async_persistence(conformance_uri) as persistence:
            assert type(persistence.checkpointer) is AsyncPostgresSaver
            yield persistence.checkpointer

    report = await validate(checkpointer_test(name="AsyncPostgresSaver")(factory))

    assert _passed(report), report.to_dict()
    assert _detected(report) >= BASE
    assert report.passed_all(), report.to_dict()


async def test_sync_saver_from_open_persistence_conforms(conformance_uri: str) -> None:
    async def factory() -> AsyncGenerator[BaseCheckpointSaver[str], None]:
        with open_persistence(conformance_uri) as persistence:
            assert type(persistence.checkpointer) is PostgresSaver
            yield SyncSaverThroughAsync(persistence.checkpointer)

    report = await validate(checkpointer_test(name="PostgresSaver")(factory))

    assert _passed(report), report.to_dict()
    assert BASE | {"prune"} <= _detected(report)
    assert report.passed_all(), report.to_dict()


def test_sync_saver_round_trip(conformance_uri: str) -> None:
    thread = f"conformance-{uuid.uuid4().hex[:12]}"
    with open_persistence(conformance_uri) as persistence:
        saver = persistence.checkpointer
        config: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        first = empty_checkpoint()
        first["channel_values"] = {"messages": ["hello"]}
        first["channel_versions"] = {"messages": saver.get_next_version(None, None)}
        stored = saver.put(
            config, first, {"source": "input", "step": -1}, first["channel_versions"]
        )
        saver.put_writes(stored, [("messages", "pending")], task_id="task-1")
        second = empty_checkpoint()
        second["channel_values"] = {"messages": ["hello", "world"]}
        second["channel_versions"] = {
            "messages": saver.get_next_version(first["channel_versions"]["messages"], None)
        }
        latest = saver.put(
            stored, second, {"source": "loop", "step": 0}, second["channel_versions"]
        )

        got = saver.get_tuple(config)
        assert got is not None
        assert got.config["configurable"]["checkpoint_id"] == second["id"]
        assert got.checkpoint["channel_values"] == {"messages": ["hello", "world"]}
        assert got.parent_config is not None
        assert got.parent_config["configurable"]["checkpoint_id"] == first["id"]
        assert got.metadata["source"] == "loop"

        older = saver.get_tuple(stored)
        assert older is not None
        assert older.checkpoint["channel_values"] == {"messages": ["hello"]}
        assert [(task, channel, value) for task, channel, value in older.pending_writes or []] == [
            ("task-1", "messages", "pending")
        ]

        listed = list(saver.list(config))
        assert [t.checkpoint["id"] for t in listed] == [second["id"], first["id"]]
        assert [t.checkpoint["id"] for t in saver.list(config, filter={"source": "input"})] == [
            first["id"]
        ]
        assert [t.checkpoint["id"] for t in saver.list(config, before=latest)] == [first["id"]]

        saver.delete_thread(thread)
        assert saver.get_tuple(config) is None
        assert list(saver.list(config)) == []
