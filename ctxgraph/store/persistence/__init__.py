"""The database: Postgres checkpointer and Store, the embedded server, thread locks, the archive."""

from ctxgraph.store.persistence.connection import (
    AsyncPersistence,
    DatabaseError,
    Persistence,
    database_errors,
    open_async_persistence,
    open_persistence,
)
from ctxgraph.store.persistence.embedded import EmbeddedPostgresError, database_uri
from ctxgraph.store.persistence.thread_lock import (
    DEFAULT_WAIT,
    ThreadBusyError,
    ThreadLockError,
    athread_lock,
    thread_lock,
)

__all__ = [
    "DEFAULT_WAIT",
    "AsyncPersistence",
    "DatabaseError",
    "EmbeddedPostgresError",
    "Persistence",
    "ThreadBusyError",
    "ThreadLockError",
    "athread_lock",
    "database_errors",
    "database_uri",
    "open_async_persistence",
    "open_persistence",
    "thread_lock",
]
