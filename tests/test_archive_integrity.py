"""Every field of an archive record is covered by its hash, and a turn notices a damaged archive.

On the embedded Postgres: a ``created_at`` edited in the Store breaks ``verify`` and is
marked by ``threads show``; a committed version deleted from the Store makes the next
compaction warn; records written before the full coverage still verify by their old rule.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from ctxgraph.graph import Graph, build_graph
from ctxgraph.graph.cli.notices import is_routine
from ctxgraph.graph.cli.threads import show_thread, verify_thread_command
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.summary import CHAIN_SEED
from ctxgraph.store.namespaces import thread_archive
from ctxgraph.store.persistence.archive import (
    HASH_VERSION,
    TAMPERED,
    ArchiveRecord,
    ThreadArchive,
    build_record,
    record_digest,
    tampered_versions,
    verify_records,
    verify_thread,
    version_key,
)
from ctxgraph.store.persistence.connection import Persistence

CTX = Context(user_id="u-integrity")
SETTINGS = Settings(trigger_messages=8, keep_messages=2, memory_extraction="off")
FILLER = " ".join(["The carrier confirmed the pickup window and the customs papers."] * 6)
EDITED_AT = "1999-12-31T23:59:59+00:00"


def graph_on(persistence: Persistence) -> Graph:
    demo = demo_models()
    return build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(
            main=ScriptedChatModel(responder=lambda _: AIMessage("ok")), summary=demo.summary
        ),
        settings=SETTINGS,
    )


def run(graph: Graph, thread_id: str, text: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread_id}}
    return graph.invoke({"messages": [HumanMessage(text)]}, config, context=CTX)


def mark_of(graph: Graph, thread_id: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread_id}}
    return dict(graph.get_state(config).values.get("compaction") or {})


def compact_once_more(graph: Graph, thread_id: str, start: int) -> int:
    """Run turns until the thread commits one more compaction; returns the turns' next number."""
    version = mark_of(graph, thread_id).get("version", 0)
    for number in range(start, start + 12):
        run(graph, thread_id, f"Note {number}: parcel P-{100 + number} leaves. {FILLER}")
        if mark_of(graph, thread_id).get("version", 0) > version:
            return number + 1
    raise AssertionError(f"thread {thread_id} did not compact past v{version}")


def compacted(persistence: Persistence, thread_id: str, versions: int = 1) -> Graph:
    graph = graph_on(persistence)
    number = 1
    for _ in range(versions):
        number = compact_once_more(graph, thread_id, number)
    assert mark_of(graph, thread_id)["version"] == versions
    return graph


def edit_field(persistence: Persistence, thread_id: str, version: int, **fields: Any) -> None:
    """Change fields of a stored record, as someone with database access."""
    item = persistence.store.get(thread_archive(thread_id), version_key(version))
    assert item is not None
    persistence.store.put(thread_archive(thread_id), version_key(version), {**item.value, **fields})


def shown(persistence: Persistence, thread_id: str) -> str:
    out = io.StringIO()
    show_thread(persistence, thread_id, out)
    return out.getvalue()


def archive_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "ctxgraph.compaction" and "archive version" in r.getMessage()
    ]


# --- the record hash covers every field -------------------------------------------------


def test_a_record_written_now_carries_the_full_coverage_hash(
    persistence: Persistence, thread_id: str
) -> None:
    graph = compacted(persistence, thread_id)
    record = ThreadArchive(persistence.store, thread_id).get(1)
    assert record is not None
    assert record["hash_version"] == HASH_VERSION
    assert record["record_hash"] == record_digest(record)  # read back from Postgres
    assert verify_thread(persistence.store, thread_id, mark_of(graph, thread_id)).ok


def test_an_edited_created_at_breaks_verify_and_threads_show_marks_it(
    persistence: Persistence, thread_id: str
) -> None:
    graph = compacted(persistence, thread_id)
    mark = mark_of(graph, thread_id)
    assert "does not verify" not in shown(persistence, thread_id)

    edit_field(persistence, thread_id, 1, created_at=EDITED_AT)

    report = verify_thread(persistence.store, thread_id, mark)
    assert (report.ok, report.first_broken_version) == (False, 1)
    assert report.reason == (
        "version 1's record hash does not match its fields "
        "(a field such as created_at was edited, added or removed)"
    )
    out = io.StringIO()
    assert verify_thread_command(persistence, thread_id, out) == 1
    assert "BROKEN at version 1: version 1's record hash does not match" in out.getvalue()
    lines = shown(persistence, thread_id).splitlines()
    assert lines[1] == (
        f"!!!! the archive of thread {thread_id} does not verify: broken at version 1: "
        f"{report.reason}; `ctxgraph threads verify {thread_id}` !!!!"
    )
    assert any(TAMPERED in line for line in lines)


@pytest.mark.parametrize(
    "fields",
    [
        {"created_at": EDITED_AT},
        {"extra": "added"},
        {"hash_version": 3},
        {"record_hash": "0" * 64},
    ],
)
def test_any_field_edit_is_a_break(fields: dict[str, Any]) -> None:
    first, second = records(2)
    edited: ArchiveRecord = {**second, **fields}  # type: ignore[typeddict-item]
    report = verify_records([first, edited], None)
    assert (report.ok, report.first_broken_version, report.versions_checked) == (False, 2, 1)
    assert tampered_versions([(1, first), (2, edited)]).keys() == {2}


def test_a_removed_created_at_is_a_break() -> None:
    first, second = records(2)
    edited = {k: v for k, v in second.items() if k != "created_at"}
    report = verify_records([first, edited], None)  # type: ignore[list-item]
    assert (report.ok, report.first_broken_version) == (False, 2)
    assert report.reason == "the record of version 2 has no valid 'created_at' field"


def records(count: int) -> list[ArchiveRecord]:
    built: list[ArchiveRecord] = []
    previous_hash, cursor = CHAIN_SEED, 0
    for version in range(1, count + 1):
        record = build_record(
            version=version,
            messages=[
                HumanMessage(f"q{version}", id=f"h{version}"),
                AIMessage("a", id=f"a{version}"),
            ],
            summary={"schema_version": 1, "text": f"s{version}"},
            previous_cursor=cursor,
            previous_chain_hash=previous_hash,
        )
        built.append(record)
        previous_hash, cursor = record["chain_hash"], record["cursor"]
    return built


def old_rule(record: ArchiveRecord) -> ArchiveRecord:
    """The record as written before the full coverage: no hash_version, no record_hash."""
    old = {k: v for k, v in record.items() if k not in ("hash_version", "record_hash")}
    return old  # type: ignore[return-value]


def test_records_written_before_verify_by_their_old_rule() -> None:
    old = [old_rule(record) for record in records(3)]
    assert verify_records(old, None).ok
    # The old rule does not cover created_at: such a record still verifies, as before.
    assert verify_records([old[0], {**old[1], "created_at": EDITED_AT}, old[2]], None).ok
    # An archive that goes on with new records verifies too.
    mixed = [*old[:2], *records(3)[2:]]
    assert verify_records(mixed, None).ok


def test_a_chain_never_goes_back_to_the_old_rule() -> None:
    first, second, third = records(3)
    stripped = [first, old_rule(second), third]
    report = verify_records(stripped, None)
    assert (report.ok, report.first_broken_version) == (False, 2)
    assert report.reason is not None and "no record hash although an earlier" in report.reason
    assert tampered_versions(list(enumerate(stripped, start=1))).keys() == {2}


def test_a_prepared_leftover_above_the_mark_is_harmless_for_verify_records_too(
    persistence: Persistence, thread_id: str
) -> None:
    archive = ThreadArchive(persistence.store, thread_id)
    first, second, leftover = records(3)
    archive.put(first)
    archive.put(second)
    archive.put(leftover, committed_version=2)
    mark = {k: second[k] for k in ("version", "cursor", "checksum", "chain_hash")}

    listed = verify_records(archive.records(), mark)
    stored = verify_thread(persistence.store, thread_id, mark)

    assert listed == stored
    assert (listed.ok, listed.versions_checked, listed.prepared) == (True, 2, (3,))


# --- the next turn notices a damaged archive -------------------------------------------


def test_a_deleted_committed_version_makes_the_next_turn_warn(
    persistence: Persistence, thread_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    graph = compacted(persistence, thread_id)
    persistence.store.delete(thread_archive(thread_id), version_key(1))

    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        compact_once_more(graph, thread_id, 100)
        compact_once_more(graph, thread_id, 200)

    warned = archive_warnings(caplog)
    assert [r.getMessage() for r in warned] == [
        f"archive version 1 of thread {thread_id} is missing from the archive: the thread "
        "state's mark is at v1, so the messages it folded cannot be read back (deleted from "
        f"the Store?); `ctxgraph threads verify {thread_id}` checks the whole chain"
    ]
    assert not is_routine(warned[0])  # the command line prints it as "warning: ..."
    lines = shown(persistence, thread_id).splitlines()
    assert lines[1].startswith(
        f"!!!! the archive of thread {thread_id} does not verify: broken at version 1: "
        "version 1 is missing from the archive"
    )


def test_a_fresh_graph_names_a_version_missing_in_the_middle(
    persistence: Persistence, thread_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    compacted(persistence, thread_id, versions=2)
    persistence.store.delete(thread_archive(thread_id), version_key(1))

    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        compact_once_more(graph_on(persistence), thread_id, 100)

    messages = [r.getMessage() for r in archive_warnings(caplog)]
    assert len(messages) == 1
    assert messages[0].startswith(
        f"archive version 1 of thread {thread_id} is missing from the archive: the thread "
        "state's mark is at v2"
    )


def test_an_edited_latest_version_makes_the_next_turn_of_the_same_graph_warn(
    persistence: Persistence, thread_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    graph = compacted(persistence, thread_id)
    edit_field(persistence, thread_id, 1, created_at=EDITED_AT)

    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        compact_once_more(graph, thread_id, 100)

    assert [r.getMessage() for r in archive_warnings(caplog)] == [
        f"archive version 1 of thread {thread_id}: {TAMPERED} (version 1's record hash does "
        "not match its fields (a field such as created_at was edited, added or removed)); "
        f"`ctxgraph threads verify {thread_id}` checks the whole chain"
    ]


def test_an_intact_archive_warns_about_nothing(
    persistence: Persistence, thread_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        graph = compacted(persistence, thread_id, versions=2)
        compact_once_more(graph, thread_id, 100)
        compact_once_more(graph_on(persistence), thread_id, 200)
    assert archive_warnings(caplog) == []
    assert "does not verify" not in shown(persistence, thread_id)
