"""A per-namespace change counter in Postgres, kept by a trigger on the Store's table.

Search indexes ask "did this namespace change?" before every query. Without help that is
an aggregate over the namespace's rows, which grows with the number of facts; with this
counter it is one primary-key lookup. The trigger counts every insert, update and delete
of a ``memory.*`` row, whoever makes it, so any process sharing the database is seen.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import psycopg.errors

__all__ = ["VERSION_QUERY", "install_change_tracking", "tracking_probe"]

logger = logging.getLogger("ctxgraph.memory")

TABLE = "ctxgraph_namespace_versions"

_INSTALL = f"""
SELECT pg_advisory_xact_lock(hashtext('{TABLE}'));
CREATE TABLE IF NOT EXISTS {TABLE} (
    prefix text PRIMARY KEY,
    version bigint NOT NULL
);
CREATE OR REPLACE FUNCTION {TABLE}_bump() RETURNS trigger AS $$
BEGIN
    IF TG_OP <> 'DELETE' AND NEW.prefix LIKE 'memory.%' THEN
        INSERT INTO {TABLE} AS v (prefix, version) VALUES (NEW.prefix, 1)
        ON CONFLICT (prefix) DO UPDATE SET version = v.version + 1;
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.prefix LIKE 'memory.%'
            AND (TG_OP = 'DELETE' OR OLD.prefix IS DISTINCT FROM NEW.prefix) THEN
        INSERT INTO {TABLE} AS v (prefix, version) VALUES (OLD.prefix, 1)
        ON CONFLICT (prefix) DO UPDATE SET version = v.version + 1;
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS {TABLE}_trigger ON store;
CREATE TRIGGER {TABLE}_trigger AFTER INSERT OR UPDATE OR DELETE ON store
    FOR EACH ROW EXECUTE FUNCTION {TABLE}_bump();
"""

_INSTALLED = f"SELECT 1 FROM pg_trigger WHERE tgname = '{TABLE}_trigger' AND NOT tgisinternal"

VERSION_QUERY = f"SELECT version FROM {TABLE} WHERE prefix = %s"
"""The change counter of one namespace prefix (no row: never changed since installed)."""

tracking_probe = _INSTALLED
"""A query that returns a row when the trigger is installed in the database."""


def install_change_tracking(uri: str) -> bool:
    """Create the counter table and trigger once per database (idempotent, serialized).

    Returns False, with a warning, when the database refuses (for example a role without
    the right to create functions): searches then fall back to a slower aggregate check.
    """
    try:
        with psycopg.connect(uri, autocommit=True) as conn:
            if conn.execute(_INSTALLED).fetchone() is not None:
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
