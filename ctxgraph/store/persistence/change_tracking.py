"""Per-namespace change counters and a change log in Postgres, kept by a trigger.

Search indexes ask "did this namespace change, and which facts?" before every query.
Without help that is an aggregate over the namespace's rows plus a diff of all its keys,
which grow with the number of facts; with the counter it is one primary-key lookup, and
the log names the keys written since a given counter value. The trigger records every
insert, update and delete of a ``memory.*`` row, whoever makes it. The counter row stays
locked until the writing transaction ends, so the writes of one namespace commit in
counter order, and a reader that sees counter N sees every change up to N.

Each counter row also carries an epoch, drawn from a database-wide sequence when the row
is created. Deleting a namespace's tracking rows (``users delete`` does) and writing to it
again restarts its counter from 1, and the log no longer names the deleted keys; the new
epoch tells a reader that its counter and the log are no longer comparable, so it compares
every key instead.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import psycopg.errors

__all__ = [
    "CHANGED_ROWS_QUERY",
    "EPOCHS",
    "STORE_TABLE",
    "STORE_TABLE_COLUMNS",
    "STORE_TABLE_KEY",
    "VERSION_QUERY",
    "install_change_tracking",
    "row_epoch",
    "row_version",
    "tracking_probe",
]

logger = logging.getLogger("ctxgraph.memory")

STORE_TABLE = "store"
"""The table ``langgraph-checkpoint-postgres`` keeps Store items in; the trigger and the
freshness queries of ``store.search.index`` read it directly."""

STORE_TABLE_COLUMNS: dict[str, str] = {
    "prefix": "text",
    "key": "text",
    "value": "jsonb",
    "updated_at": "timestamp with time zone",
}
"""The columns of ``store`` that ctxgraph's SQL reads, with their ``information_schema`` type."""

STORE_TABLE_KEY = ("prefix", "key")
"""The primary key of ``store``: one row per namespace prefix and key."""

TABLE = "ctxgraph_namespace_versions"
CHANGES = "ctxgraph_namespace_changes"
EPOCHS = "ctxgraph_namespace_epochs"
"""The sequence that numbers each creation of a counter row (never restarted; not owned
by the table, so even a dropped and recreated table does not reuse an epoch)."""

_INSTALL = f"""
SELECT pg_advisory_xact_lock(hashtext('{TABLE}'));
CREATE SEQUENCE IF NOT EXISTS {EPOCHS};
CREATE TABLE IF NOT EXISTS {TABLE} (
    prefix text PRIMARY KEY,
    version bigint NOT NULL,
    epoch bigint NOT NULL DEFAULT nextval('{EPOCHS}')
);
ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS
    epoch bigint NOT NULL DEFAULT nextval('{EPOCHS}');
CREATE TABLE IF NOT EXISTS {CHANGES} (
    prefix text NOT NULL,
    key text NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (prefix, key)
);
CREATE INDEX IF NOT EXISTS {CHANGES}_by_version ON {CHANGES} (prefix, version);
CREATE OR REPLACE FUNCTION {TABLE}_note(changed_prefix text, changed_key text)
RETURNS void AS $$
DECLARE
    counter bigint;
BEGIN
    -- Update first: only a new row draws an epoch (an upsert would draw one every time).
    UPDATE {TABLE} SET version = version + 1 WHERE prefix = changed_prefix
    RETURNING version INTO counter;
    IF NOT FOUND THEN
        INSERT INTO {TABLE} AS v (prefix, version) VALUES (changed_prefix, 1)
        ON CONFLICT (prefix) DO UPDATE SET version = v.version + 1
        RETURNING version INTO counter;
    END IF;
    INSERT INTO {CHANGES} AS c (prefix, key, version)
    VALUES (changed_prefix, changed_key, counter)
    ON CONFLICT (prefix, key) DO UPDATE SET version = EXCLUDED.version;
END
$$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION {TABLE}_bump() RETURNS trigger AS $$
BEGIN
    IF TG_OP <> 'DELETE' AND NEW.prefix LIKE 'memory.%' THEN
        PERFORM {TABLE}_note(NEW.prefix, NEW.key);
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.prefix LIKE 'memory.%'
            AND (TG_OP = 'DELETE' OR (OLD.prefix, OLD.key) IS DISTINCT FROM (NEW.prefix, NEW.key))
            THEN
        PERFORM {TABLE}_note(OLD.prefix, OLD.key);
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS {TABLE}_trigger ON {STORE_TABLE};
CREATE TRIGGER {TABLE}_trigger AFTER INSERT OR UPDATE OR DELETE ON {STORE_TABLE}
    FOR EACH ROW EXECUTE FUNCTION {TABLE}_bump();
"""

_INSTALLED = (
    f"SELECT to_regclass('{CHANGES}') IS NOT NULL AND EXISTS ("
    f"SELECT 1 FROM pg_trigger WHERE tgname = '{TABLE}_trigger' AND NOT tgisinternal) "
    f"AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('{TABLE}') "
    "AND attname = 'epoch' AND NOT attisdropped) AS ready"
)

VERSION_QUERY = f"SELECT version, epoch FROM {TABLE} WHERE prefix = %s"
"""The change counter and epoch of one namespace prefix (no row: never changed since
installed, or its tracking rows were deleted)."""

CHANGED_ROWS_QUERY = (
    f"SELECT c.key, s.value, s.updated_at FROM {CHANGES} c "
    f"LEFT JOIN {STORE_TABLE} s ON s.prefix = c.prefix AND s.key = c.key "
    "WHERE c.prefix = %s AND c.version > %s"
)
"""Keys of one namespace written or deleted after a given counter value, with their
stored rows, in one round trip; a key with no row (NULL value) was deleted."""

tracking_probe = _INSTALLED
"""A query whose ``ready`` column is true when the counter (with its epoch), log and
trigger are installed."""


def install_change_tracking(uri: str) -> bool:
    """Create the counter table and trigger once per database (idempotent, serialized).

    A database installed before counters had an epoch gets the column (each existing row
    a distinct epoch, so every process re-reads those namespaces once).

    Returns False, with a warning, when the database refuses (for example a role without
    the right to create functions): searches then fall back to a slower aggregate check.
    """
    try:
        with psycopg.connect(uri, autocommit=True) as conn:
            ready = conn.execute(_INSTALLED).fetchone()
            if ready is not None and ready[0]:
                return True
            with conn.transaction():
                conn.execute(_INSTALL)
            return True
    except psycopg.errors.InsufficientPrivilege as error:
        logger.warning(
            "memory change tracking not installed (%s); searches check freshness with an "
            "aggregate over each namespace instead",
            str(error).strip().splitlines()[0],
        )
        return False


def row_version(row: Any) -> int:
    """The counter from a ``VERSION_QUERY`` row (0 when the namespace has no row yet)."""
    if row is None:
        return 0
    value = row["version"] if isinstance(row, dict) else row[0]
    return int(value)


def row_epoch(row: Any) -> int | None:
    """The epoch from a ``VERSION_QUERY`` row (None when the namespace has no row)."""
    if row is None:
        return None
    value = row["epoch"] if isinstance(row, dict) else row[1]
    return int(value)
