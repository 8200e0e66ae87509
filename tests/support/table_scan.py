"""Scan every table of a Postgres database for a text: rows as text and bytea bytes."""

from __future__ import annotations

import psycopg
from psycopg import sql


def rows_holding(uri: str, needle: str) -> dict[str, int]:
    """Table name -> rows whose text form or any bytea column holds ``needle`` (case-blind).

    Checkpoint blobs and writes are msgpack bytes, whose strings are plain UTF-8, so a
    byte search finds them; every other column is searched in the row's text form.
    """
    found: dict[str, int] = {}
    with psycopg.connect(uri, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            )
        ]
        for table in tables:
            byteas = [
                row[0]
                for row in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE "
                    "table_schema = 'public' AND table_name = %s AND data_type = 'bytea'",
                    (table,),
                )
            ]
            tests = [sql.SQL("t::text ILIKE %s")]
            args: list[object] = [f"%{needle}%"]
            for column in byteas:
                tests.append(
                    sql.SQL("position(convert_to(%s, 'UTF8') in {}) > 0").format(
                        sql.Identifier(column)
                    )
                )
                args.append(needle)
            query = sql.SQL("SELECT count(*) FROM {} AS t WHERE {}").format(
                sql.Identifier(table), sql.SQL(" OR ").join(tests)
            )
            row = conn.execute(query, args).fetchone()
            count = int(row[0]) if row else 0
            if count:
                found[table] = count
    return found
