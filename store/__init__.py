"""Persistence: the Postgres checkpointer and Store, and where the database lives."""

from store.embedded import EmbeddedPostgresError, database_uri
from store.persistence import (
    AsyncPersistence,
    DatabaseError,
    Persistence,
    open_async_persistence,
    open_persistence,
)

__all__ = [
    "AsyncPersistence",
    "DatabaseError",
    "EmbeddedPostgresError",
    "Persistence",
    "database_uri",
    "open_async_persistence",
    "open_persistence",
]
