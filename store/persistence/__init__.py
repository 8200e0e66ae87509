"""The database: Postgres checkpointer and Store, the embedded server, the archive, listings."""

from ctxgraph.store.persistence.connection import (
    AsyncPersistence,
    DatabaseError,
    Persistence,
    open_async_persistence,
    open_persistence,
)
from ctxgraph.store.persistence.embedded import EmbeddedPostgresError, database_uri

__all__ = [
    "AsyncPersistence",
    "DatabaseError",
    "EmbeddedPostgresError",
    "Persistence",
    "database_uri",
    "open_async_persistence",
    "open_persistence",
]
