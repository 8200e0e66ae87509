"""The database: Postgres checkpointer and Store, the embedded server, thread locks, the archive."""

from ctxgraph.store.persistence.archive_redaction import (
    ArchiveRedaction,
    ReceiptReusedError,
    aredact_archive,
    redact_archive,
)
from ctxgraph.store.persistence.checkpoint_rewrite import (
    CheckpointRewrite,
    CheckpointRewriteError,
    PendingWritesError,
    arewrite_thread,
    rewrite_thread,
)
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
    "ArchiveRedaction",
    "AsyncPersistence",
    "CheckpointRewrite",
    "CheckpointRewriteError",
    "DatabaseError",
    "EmbeddedPostgresError",
    "PendingWritesError",
    "Persistence",
    "ReceiptReusedError",
    "ThreadBusyError",
    "ThreadLockError",
    "aredact_archive",
    "arewrite_thread",
    "athread_lock",
    "database_errors",
    "database_uri",
    "open_async_persistence",
    "open_persistence",
    "redact_archive",
    "rewrite_thread",
    "thread_lock",
]
