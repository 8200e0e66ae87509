"""A user deleted and then created again is never served stale by another connection's index.

``users delete`` removes the user's facts and the change counters and log of its
namespaces; the next write starts the counter from 1 again. An index warmed before the
deletion, in another connection (another process in production), must notice that the
counter row is a new one, whatever its value, and keep only the facts stored now.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

import psycopg
import pytest
from langgraph.store.base import BaseStore
from langgraph.store.postgres import PostgresStore
from psycopg.rows import dict_row

from ctxgraph.store.namespaces import user_facts
from ctxgraph.store.persistence.change_tracking import install_change_tracking, tracking_probe
from ctxgraph.store.persistence.connection import (
    Persistence,
    open_async_persistence,
    open_persistence,
)
from ctxgraph.store.search.index import FactIndexCache
from ctxgraph.store.user_deletion import adelete_user, delete_user

AGENT = "assistant"
OLD = {"home": "Lives in Kyoto", "editor": "Uses Emacs", "pet": "Has a parrot"}


def fact(content: str) -> dict[str, str]:
    return {"content": content, "created_at": "2026-01-01T00:00:00+00:00"}


def new_user() -> str:
    return f"u-{uuid.uuid4().hex[:12]}"


def counter(uri: str, namespace: tuple[str, ...]) -> int | None:
    with psycopg.connect(uri) as connection:
        row = connection.execute(
            "SELECT version FROM ctxgraph_namespace_versions WHERE prefix = %s",
            (".".join(namespace),),
        ).fetchone()
    return None if row is None else int(row[0])


def write(store: BaseStore, namespace: tuple[str, ...], facts: dict[str, str]) -> None:
    for key, content in facts.items():
        store.put(namespace, key, fact(content))


def contents(pairs: Sequence[tuple[str, object]]) -> list[str]:
    return sorted(str(value["content"]) for _, value in pairs if isinstance(value, dict))


def new_facts(count: int) -> dict[str, str]:
    """``count`` facts of the new user, one of them under an old key with new content."""
    facts = {"home": "Lives in Lisbon"}
    facts.update({f"new{i}": f"Plays chess opening {i}" for i in range(count - 1)})
    return facts


@pytest.fixture
def two_connections(database_uri: str) -> Iterator[tuple[Persistence, Persistence]]:
    with open_persistence(database_uri) as reader, open_persistence(database_uri) as writer:
        yield reader, writer


@pytest.mark.parametrize("count", [len(OLD), len(OLD) - 1, len(OLD) + 2])
def test_a_recreated_user_is_served_only_its_new_facts(
    two_connections: tuple[Persistence, Persistence], database_uri: str, count: int
) -> None:
    # count == len(OLD): the new counter ends where the warmed index's counter was.
    reader, writer = two_connections
    user = new_user()
    namespace = user_facts(user, AGENT)
    cache = FactIndexCache()  # not the process-wide one, which the deletion clears
    write(writer.store, namespace, OLD)
    assert contents(cache.values(reader.store, namespace)) == sorted(OLD.values())
    assert counter(database_uri, namespace) == len(OLD)

    delete_user(writer.store, writer.checkpointer, user)
    assert counter(database_uri, namespace) is None
    recreated = new_facts(count)
    write(writer.store, namespace, recreated)
    assert counter(database_uri, namespace) == count

    assert contents(cache.values(reader.store, namespace)) == sorted(recreated.values())
    assert cache.lookup(reader.store, namespace, ["kyoto"], 5).hits == []
    assert cache.lookup(reader.store, namespace, ["parrot"], 5).hits == []
    hits = cache.lookup(reader.store, namespace, ["lisbon"], 5).hits
    assert [key for key, _, _ in hits] == ["home"]
    # Later writes are again read from the log of the new counter row.
    writer.store.delete(namespace, "home")
    writer.store.put(namespace, "pet", fact("Has a tortoise"))
    assert contents(cache.values(reader.store, namespace)) == sorted(
        [*(v for k, v in recreated.items() if k != "home"), "Has a tortoise"]
    )


def test_a_deleted_user_read_before_it_is_recreated_has_no_facts(
    two_connections: tuple[Persistence, Persistence],
) -> None:
    reader, writer = two_connections
    user = new_user()
    namespace = user_facts(user, AGENT)
    cache = FactIndexCache()
    write(writer.store, namespace, OLD)
    assert len(cache.values(reader.store, namespace)) == len(OLD)

    delete_user(writer.store, writer.checkpointer, user)
    assert cache.values(reader.store, namespace) == []
    assert cache.lookup(reader.store, namespace, ["kyoto"], 5).hits == []
    write(writer.store, namespace, {"editor": "Uses Helix"})
    assert contents(cache.values(reader.store, namespace)) == ["Uses Helix"]


def test_a_reader_between_the_log_and_counter_deletions_drops_the_deleted_facts(
    two_connections: tuple[Persistence, Persistence], database_uri: str
) -> None:
    # The counter row is still there (same epoch, counter moved), the log already empty.
    reader, writer = two_connections
    namespace = user_facts(new_user(), AGENT)
    cache = FactIndexCache()
    write(writer.store, namespace, OLD)
    assert len(cache.values(reader.store, namespace)) == len(OLD)
    with psycopg.connect(database_uri, autocommit=True) as connection:
        connection.execute("DELETE FROM store WHERE prefix = %s", (".".join(namespace),))
        connection.execute(
            "DELETE FROM ctxgraph_namespace_changes WHERE prefix = %s", (".".join(namespace),)
        )
    assert cache.values(reader.store, namespace) == []


async def test_async_reader_is_served_only_the_new_facts(database_uri: str) -> None:
    async with (
        open_async_persistence(database_uri) as reader,
        open_async_persistence(database_uri) as writer,
    ):
        user = new_user()
        namespace = user_facts(user, AGENT)
        cache = FactIndexCache()
        for key, content in OLD.items():
            await writer.store.aput(namespace, key, fact(content))
        assert contents(await cache.avalues(reader.store, namespace)) == sorted(OLD.values())

        await adelete_user(writer.store, writer.checkpointer, user)
        recreated = new_facts(len(OLD))
        for key, content in recreated.items():
            await writer.store.aput(namespace, key, fact(content))
        assert counter(database_uri, namespace) == len(OLD)

        found = await cache.avalues(reader.store, namespace)
        assert contents(found) == sorted(recreated.values())
        assert (await cache.alookup(reader.store, namespace, ["kyoto"], 5)).hits == []


# -- a database installed before counters had an epoch ------------------------------------

PRE_EPOCH_INSTALL = """
CREATE TABLE ctxgraph_namespace_versions (prefix text PRIMARY KEY, version bigint NOT NULL);
CREATE TABLE ctxgraph_namespace_changes (
    prefix text NOT NULL, key text NOT NULL, version bigint NOT NULL,
    PRIMARY KEY (prefix, key)
);
CREATE INDEX ctxgraph_namespace_changes_by_version
    ON ctxgraph_namespace_changes (prefix, version);
CREATE FUNCTION ctxgraph_namespace_versions_note(changed_prefix text, changed_key text)
RETURNS void AS $$
DECLARE
    counter bigint;
BEGIN
    INSERT INTO ctxgraph_namespace_versions AS v (prefix, version) VALUES (changed_prefix, 1)
    ON CONFLICT (prefix) DO UPDATE SET version = v.version + 1
    RETURNING version INTO counter;
    INSERT INTO ctxgraph_namespace_changes AS c (prefix, key, version)
    VALUES (changed_prefix, changed_key, counter)
    ON CONFLICT (prefix, key) DO UPDATE SET version = EXCLUDED.version;
END
$$ LANGUAGE plpgsql;
CREATE FUNCTION ctxgraph_namespace_versions_bump() RETURNS trigger AS $$
BEGIN
    IF TG_OP <> 'DELETE' AND NEW.prefix LIKE 'memory.%' THEN
        PERFORM ctxgraph_namespace_versions_note(NEW.prefix, NEW.key);
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.prefix LIKE 'memory.%'
            AND (TG_OP = 'DELETE' OR (OLD.prefix, OLD.key) IS DISTINCT FROM (NEW.prefix, NEW.key))
            THEN
        PERFORM ctxgraph_namespace_versions_note(OLD.prefix, OLD.key);
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER ctxgraph_namespace_versions_trigger AFTER INSERT OR UPDATE OR DELETE ON store
    FOR EACH ROW EXECUTE FUNCTION ctxgraph_namespace_versions_bump();
"""


def test_a_database_without_epochs_is_upgraded_on_install(new_database: str) -> None:
    first, second = user_facts(new_user(), AGENT), user_facts(new_user(), AGENT)
    with psycopg.connect(new_database, autocommit=True, row_factory=dict_row) as connection:
        store = PostgresStore(connection)
        store.setup()
        connection.execute(PRE_EPOCH_INSTALL)
        write(store, first, OLD)
        write(store, second, {"editor": "Uses Vim"})
        probe = connection.execute(tracking_probe).fetchone()
        assert probe == {"ready": False}  # the old shape is not ready for this code

    assert install_change_tracking(new_database) is True
    assert install_change_tracking(new_database) is True  # idempotent

    with psycopg.connect(new_database, autocommit=True) as check:
        ready = check.execute(tracking_probe).fetchone()
        assert ready == (True,)
        epochs = check.execute(
            "SELECT prefix, version, epoch FROM ctxgraph_namespace_versions ORDER BY prefix"
        ).fetchall()
        assert sorted((p, v) for p, v, _ in epochs) == sorted(
            [(".".join(first), len(OLD)), (".".join(second), 1)]
        )
        assert len({epoch for _, _, epoch in epochs}) == 2
    with (
        open_persistence(new_database) as reader,
        open_persistence(new_database) as writer,
    ):
        cache = FactIndexCache()
        assert contents(cache.values(reader.store, first)) == sorted(OLD.values())
        delete_user(writer.store, writer.checkpointer, first[1])
        recreated = new_facts(len(OLD))
        write(writer.store, first, recreated)
        assert counter(new_database, first) == len(OLD)
        assert contents(cache.values(reader.store, first)) == sorted(recreated.values())
