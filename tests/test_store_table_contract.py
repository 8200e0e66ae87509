"""The ``store`` table of ``langgraph-checkpoint-postgres`` still has what ctxgraph's SQL reads.

The change-tracking trigger and the memory search's freshness queries read the Store's
table directly; a release that renames or retypes one of its columns must fail here, by
name, rather than as a broken search.
"""

from __future__ import annotations

import psycopg

from ctxgraph.store.persistence.change_tracking import (
    STORE_TABLE,
    STORE_TABLE_COLUMNS,
    STORE_TABLE_KEY,
)
from ctxgraph.store.persistence.connection import Persistence

COLUMNS = """
SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = %s
"""
PRIMARY_KEY = """
SELECT k.column_name FROM information_schema.table_constraints c
JOIN information_schema.key_column_usage k
  ON k.constraint_schema = c.constraint_schema AND k.constraint_name = c.constraint_name
WHERE c.table_schema = current_schema() AND c.table_name = %s
  AND c.constraint_type = 'PRIMARY KEY'
ORDER BY k.ordinal_position
"""


def column_changes(found: dict[str, str]) -> list[str]:
    """How the found columns differ from the ones ctxgraph reads (empty: none)."""
    changes = []
    for name, expected in STORE_TABLE_COLUMNS.items():
        if name not in found:
            changes.append(f"column {name!r} ({expected}) is missing")
        elif found[name] != expected:
            changes.append(f"column {name!r} is {found[name]!r}, expected {expected!r}")
    return changes


def test_store_table_has_the_columns_ctxgraph_reads(persistence: Persistence) -> None:
    with psycopg.connect(persistence.uri) as conn:
        rows = conn.execute(COLUMNS, (STORE_TABLE,)).fetchall()
        key = tuple(row[0] for row in conn.execute(PRIMARY_KEY, (STORE_TABLE,)).fetchall())
    changes = column_changes({str(name): str(kind) for name, kind in rows})
    if key != STORE_TABLE_KEY:
        changes.append(f"primary key is {key}, expected {STORE_TABLE_KEY}")
    assert not changes, (
        f"langgraph-checkpoint-postgres changed its {STORE_TABLE!r} table, which "
        "store/persistence/change_tracking.py and store/search/index.py query directly: "
        + "; ".join(changes)
    )


def test_a_changed_column_is_reported_by_name() -> None:
    found = dict(STORE_TABLE_COLUMNS)
    found["updated_at"] = "timestamp without time zone"
    del found["value"]
    assert column_changes(found) == [
        "column 'value' (jsonb) is missing",
        "column 'updated_at' is 'timestamp without time zone', expected 'timestamp with time zone'",
    ]
