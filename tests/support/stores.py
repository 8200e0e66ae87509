"""Stores to run one test on both backends: in memory and the embedded Postgres."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.store.persistence.connection import Persistence, open_async_persistence

BACKENDS = ["memory", "postgres"]
"""The backend names ``backend`` and ``async_backend`` take."""


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[BaseStore]:
    """A sync Store: in memory, or the embedded Postgres (the ``persistence`` fixture)."""
    if request.param == "memory":
        yield InMemoryStore()
        return
    persistence: Persistence = request.getfixturevalue("persistence")
    yield persistence.store


@asynccontextmanager
async def async_backend(kind: str, database_uri: str) -> AsyncIterator[BaseStore]:
    """An async-capable Store of ``kind``: in memory, or an async Postgres store."""
    if kind == "memory":
        yield InMemoryStore()
        return
    async with open_async_persistence(database_uri) as persistence:
        yield persistence.store
