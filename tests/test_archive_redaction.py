"""Forgotten text leaves the compaction archive, and the archive still verifies, as redacted.

Unit cases run on an InMemoryStore; one runs a real graph thread on the embedded
Postgres, compacted twice, through ``threads verify`` and ``threads show``.
"""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import Graph, build_graph
from ctxgraph.graph.cli.threads import show_thread, verify_thread_command
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.summary import CHAIN_SEED, chain_hash, checksum
from ctxgraph.store.namespaces import thread_archive, thread_redactions
from ctxgraph.store.persistence.archive import (
    TAMPERED,
    ArchiveRecord,
    RedactionNote,
    ThreadArchive,
    averify_thread,
    build_record,
    record_digest,
    record_messages,
    tampered_versions,
    verify_thread,
    version_key,
)
from ctxgraph.store.persistence.archive_redaction import (
    ReceiptReusedError,
    aredact_archive,
    redact_archive,
)
from ctxgraph.store.persistence.connection import Persistence
from ctxgraph.store.redaction import REDACTION_MARKER, Redactor

THREAD = "t-redact"
SECRET = "passport X1234-5678"
AT = "2026-12-02T18:40:00+00:00"
LATER = "2026-12-03T09:00:00+00:00"
MARK_FIELDS = ("version", "cursor", "checksum", "chain_hash")


def folded(version: int) -> list[BaseMessage]:
    """Four messages with a tool call; version 1 says the secret, version 2 passes it on."""
    said = f"My {SECRET} is valid." if version == 1 else f"Question {version}?"
    args = {"document": SECRET} if version == 2 else {"x": version}
    return [
        HumanMessage(said, id=f"h{version}"),
        AIMessage(
            "", id=f"a{version}", tool_calls=[{"name": "check", "args": args, "id": f"c{version}"}]
        ),
        ToolMessage(f"checked {version}", tool_call_id=f"c{version}", id=f"t{version}"),
        AIMessage(f"Answer {version}", id=f"r{version}"),
    ]


def summary(version: int) -> dict[str, Any]:
    text = f"The user gave {SECRET}." if version == 2 else f"summary through {version}"
    return {"schema_version": 1, "summary": text, "ledger": {"identifiers": [f"id-{version}"]}}


def make_records(count: int) -> list[ArchiveRecord]:
    records: list[ArchiveRecord] = []
    previous, cursor = CHAIN_SEED, 0
    for version in range(1, count + 1):
        record = build_record(
            version=version,
            messages=folded(version),
            summary=summary(version),
            previous_cursor=cursor,
            previous_chain_hash=previous,
        )
        records.append(record)
        previous, cursor = record["chain_hash"], record["cursor"]
    return records


def mark_of(record: ArchiveRecord) -> dict[str, Any]:
    fields: dict[str, Any] = dict(record)
    return {name: fields[name] for name in MARK_FIELDS}


def archived(count: int = 3, *, upto: int | None = None) -> tuple[InMemoryStore, dict[str, Any]]:
    """A store holding ``count`` versions; the mark is at ``upto`` (default: the last)."""
    store = InMemoryStore()
    records = make_records(count)
    for record in records:
        ThreadArchive(store, THREAD).put(record)
    return store, mark_of(records[(upto or count) - 1])


def snapshot(store: BaseStore) -> dict[str, Any]:
    """Every archive record and anchor of the thread, as plain JSON."""
    found: dict[str, Any] = {}
    for namespace in (thread_archive(THREAD), thread_redactions(THREAD)):
        for item in store.search(namespace, limit=1000):
            found["/".join((*item.namespace, item.key))] = copy.deepcopy(item.value)
    return found


def stored(store: BaseStore, version: int) -> dict[str, Any]:
    item = store.get(thread_archive(THREAD), version_key(version))
    assert item is not None
    return copy.deepcopy(item.value)


def overwrite(store: BaseStore, version: int, value: dict[str, Any]) -> None:
    store.put(thread_archive(THREAD), version_key(version), value)


def forget(store: BaseStore, mark: dict[str, Any] | None, **options: Any) -> Any:
    receipt = options.pop("receipt_id", "r-1")
    at = options.pop("at", AT)
    redactor = options.pop("redactor", Redactor.for_text(SECRET))
    return redact_archive(store, THREAD, redactor, mark, receipt_id=receipt, at=at, **options)


def ids_of(messages: list[BaseMessage]) -> list[tuple[Any, ...]]:
    return [
        (
            m.id,
            m.type,
            m.name,
            getattr(m, "tool_call_id", None),
            *(call["id"] for call in getattr(m, "tool_calls", [])),
        )
        for m in messages
    ]


# --- a redaction removes the text and verifies as recorded -----------------------------


def test_the_text_is_gone_and_the_archive_verifies_with_the_redaction_listed() -> None:
    store, mark = archived()
    before = {v: ids_of(record_messages(r)) for v, r in ThreadArchive(store, THREAD).versioned()}

    done = forget(store, mark)

    assert done.counts == {1: 1, 2: 2}
    assert SECRET not in json.dumps(snapshot(store))
    assert REDACTION_MARKER in stored(store, 1)["messages"][0]["data"]["content"]
    after = {v: ids_of(record_messages(r)) for v, r in ThreadArchive(store, THREAD).versioned()}
    assert after == before
    third = stored(store, 3)
    assert done.mark == {**mark, "checksum": third["checksum"], "chain_hash": third["chain_hash"]}
    report = verify_thread(store, THREAD, done.mark)
    assert (report.ok, report.versions_checked) == (True, 3)
    assert report.redactions == (RedactionNote("r-1", AT, "text", (1, 2)),)
    # The thread state must take the new mark: the old one no longer matches.
    assert not verify_thread(store, THREAD, mark).ok


def test_each_changed_record_says_what_happened_and_the_anchor_matches_it() -> None:
    store, mark = archived()
    old = {version: stored(store, version) for version in (1, 2, 3)}
    forget(store, mark)

    first, third = stored(store, 1), stored(store, 3)
    assert first["redactions"] == [
        {
            "receipt": "r-1",
            "at": AT,
            "kind": "text",
            "count": 1,
            "before": {k: old[1][k] for k in ("checksum", "chain_hash", "record_hash")},
        }
    ]
    assert [entry["receipt"] for entry in third["relinked"]] == ["r-1"]
    assert third["previous_chain_hash"] == stored(store, 2)["chain_hash"]
    assert third["checksum"] == old[3]["checksum"]  # its content did not change
    anchor = store.get(thread_redactions(THREAD), "r-1")
    assert anchor is not None
    assert anchor.value["versions"]["3"]["after"]["record_hash"] == third["record_hash"]
    assert anchor.value["versions"]["3"]["count"] == 0


def test_a_second_redaction_with_the_same_text_finds_nothing_and_writes_nothing() -> None:
    store, mark = archived()
    new_mark = forget(store, mark).mark
    state = snapshot(store)

    again = forget(store, new_mark, receipt_id="r-2", at=LATER)

    assert (again.counts, again.mark) == ({}, None)
    assert snapshot(store) == state


def test_a_dry_run_counts_and_writes_nothing() -> None:
    store, mark = archived()
    state = snapshot(store)

    dry = forget(store, mark, dry_run=True)

    assert (dry.counts, dry.mark) == ({1: 1, 2: 2}, None)
    assert snapshot(store) == state


def test_two_redactions_are_both_listed_oldest_first() -> None:
    store, mark = archived()
    mark = forget(store, mark).mark
    mark = forget(
        store, mark, receipt_id="r-2", at=LATER, redactor=Redactor.for_text("Answer 1")
    ).mark

    report = verify_thread(store, THREAD, mark)

    assert report.ok
    assert [(n.receipt, n.versions) for n in report.redactions] == [("r-1", (1, 2)), ("r-2", (1,))]
    assert [entry["receipt"] for entry in stored(store, 1)["redactions"]] == ["r-1", "r-2"]


def test_a_receipt_id_is_used_once() -> None:
    store, mark = archived()
    mark = forget(store, mark).mark
    with pytest.raises(ReceiptReusedError, match="'r-1'"):
        forget(store, mark, redactor=Redactor.for_text("Answer 2"))


async def test_the_async_path_redacts_and_verifies_the_same() -> None:
    store, mark = archived()
    done = await aredact_archive(
        store, THREAD, Redactor.for_text(SECRET), mark, receipt_id="r-1", at=AT
    )
    report = await averify_thread(store, THREAD, done.mark)
    assert done.counts == {1: 1, 2: 2}
    assert report.ok and report.redactions[0].versions == (1, 2)
    assert SECRET not in json.dumps(snapshot(store))


# --- an edit that is not a recorded redaction is still caught --------------------------


def rehash_last(store: BaseStore, version: int, **fields: Any) -> dict[str, Any]:
    """Edit the last record and recompute all its hashes, as a careful forger would.

    Returns the mark that matches the forged record.
    """
    record = {**stored(store, version), **fields}
    messages = record_messages(record)  # type: ignore[arg-type]
    record["chain_hash"] = chain_hash(record["previous_chain_hash"], messages)
    record["checksum"] = checksum(record["summary"], record["cursor"], record["event_ids"])
    record["record_hash"] = record_digest(record)
    overwrite(store, version, record)
    return {name: record[name] for name in MARK_FIELDS}


def test_an_edit_after_the_redaction_is_caught() -> None:
    store, mark = archived()
    mark = forget(store, mark).mark
    edited = stored(store, 1)
    edited["summary"] = {**edited["summary"], "summary": "rewritten"}
    overwrite(store, 1, edited)

    report = verify_thread(store, THREAD, mark)

    assert (report.ok, report.first_broken_version) == (False, 1)


def test_a_rehashed_edit_of_a_redacted_record_does_not_match_its_anchor() -> None:
    store, mark = archived(2)
    forget(store, mark)
    forged_mark = rehash_last(store, 2, summary={"schema_version": 1, "summary": "other"})

    report = verify_thread(store, THREAD, forged_mark)

    assert (report.ok, report.first_broken_version) == (False, 2)
    assert "modified after redaction 'r-1'" in str(report.reason)


def test_a_redactions_entry_without_an_anchor_is_caught() -> None:
    store, _ = archived(2)
    claim = {"receipt": "made-up", "at": AT, "kind": "text", "count": 1, "before": {}}
    forged_mark = rehash_last(store, 2, summary={"schema_version": 1}, redactions=[claim])

    report = verify_thread(store, THREAD, forged_mark)

    assert (report.ok, report.first_broken_version) == (False, 2)
    assert "claims redaction 'made-up', which no redaction anchor" in str(report.reason)
    versioned = ThreadArchive(store, THREAD).versioned()
    assert tampered_versions(versioned, forged_mark, {}).keys() == {2}


def test_a_removed_redactions_entry_is_caught() -> None:
    store, mark = archived(2)
    mark = forget(store, mark).mark
    assert mark is not None
    record = stored(store, 2)
    del record["redactions"]
    record["record_hash"] = record_digest(record)
    overwrite(store, 2, record)

    report = verify_thread(store, THREAD, mark)

    assert (report.ok, report.first_broken_version) == (False, 2)
    assert "no entry for redaction 'r-1'" in str(report.reason)


def test_an_anchor_whose_after_does_not_match_is_caught() -> None:
    store, mark = archived()
    mark = forget(store, mark).mark
    anchor = store.get(thread_redactions(THREAD), "r-1")
    assert anchor is not None
    value = copy.deepcopy(anchor.value)
    value["versions"]["1"]["after"]["record_hash"] = "0" * 64
    store.put(thread_redactions(THREAD), "r-1", value)

    report = verify_thread(store, THREAD, mark)

    assert (report.ok, report.first_broken_version) == (False, 1)


def test_reordered_records_after_a_redaction_are_caught() -> None:
    store, mark = archived()
    mark = forget(store, mark).mark
    first, second = stored(store, 1), stored(store, 2)
    overwrite(store, 1, second)
    overwrite(store, 2, first)

    report = verify_thread(store, THREAD, mark)

    assert (report.ok, report.first_broken_version) == (False, 1)


def test_a_break_found_before_is_not_laundered() -> None:
    store, mark = archived()
    tampered = stored(store, 2)
    tampered["summary"] = {**tampered["summary"], "extra": "edited by hand"}
    overwrite(store, 2, tampered)

    done = forget(store, mark)

    assert (done.counts, done.unverified) == ({1: 1, 2: 2}, (2,))
    assert SECRET not in json.dumps(snapshot(store))
    assert stored(store, 2)["checksum"] == tampered["checksum"]
    report = verify_thread(store, THREAD, done.mark or mark)
    assert (report.ok, report.first_broken_version) == (False, 2)


# --- older records and prepared leftovers --------------------------------------------------


def test_old_format_records_are_upgraded_when_they_change() -> None:
    store = InMemoryStore()
    records = make_records(3)
    for record in records:
        old = {k: v for k, v in record.items() if k not in ("hash_version", "record_hash")}
        store.put(thread_archive(THREAD), version_key(record["version"]), old)

    done = forget(store, mark_of(records[-1]), redactor=Redactor.for_text("Question 2"))

    assert done.counts == {2: 1}
    assert "hash_version" not in stored(store, 1)
    assert all("record_hash" in stored(store, version) for version in (2, 3))
    assert verify_thread(store, THREAD, done.mark).ok


def test_a_prepared_leftover_above_the_mark_is_redacted_and_relinked() -> None:
    store, mark = archived(3, upto=2)

    done = forget(store, mark)

    assert (done.counts, done.prepared) == ({1: 1, 2: 2}, ())
    leftover = stored(store, 3)
    assert leftover["previous_chain_hash"] == stored(store, 2)["chain_hash"]
    assert "relinked" not in leftover and leftover["record_hash"] == record_digest(leftover)
    report = verify_thread(store, THREAD, done.mark)
    assert (report.ok, report.prepared) == (True, (3,))


def test_text_in_a_prepared_leftover_is_counted_as_prepared() -> None:
    store, mark = archived(3, upto=1)

    done = forget(store, mark, redactor=Redactor.for_text("Question 3"))

    assert (done.counts, done.prepared, done.mark) == ({3: 1}, (3,), None)
    assert "Question 3" not in json.dumps(stored(store, 3))
    assert verify_thread(store, THREAD, mark).ok


# --- a real thread on the embedded Postgres ------------------------------------------------

CTX = Context(user_id="u-redaction")
SETTINGS = Settings(trigger_messages=8, keep_messages=2, memory_extraction="off")
FILLER = " ".join(["The carrier confirmed the pickup window and the customs papers."] * 6)


def graph_on(persistence: Persistence) -> Graph:
    return build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(
            main=ScriptedChatModel(responder=lambda _: AIMessage("ok")),
            summary=demo_models().summary,
        ),
        settings=SETTINGS,
    )


def test_a_real_thread_compacted_twice_verifies_after_its_archive_is_redacted(
    persistence: Persistence, thread_id: str
) -> None:
    graph = graph_on(persistence)
    config: Any = {"configurable": {"thread_id": thread_id}}
    for number in range(1, 30):
        said = f"Note {number}: my {SECRET} is on file. {FILLER}" if number == 1 else FILLER
        graph.invoke({"messages": [HumanMessage(said)]}, config, context=CTX)
        if (graph.get_state(config).values.get("compaction") or {}).get("version", 0) >= 2:
            break
    mark = dict(graph.get_state(config).values["compaction"])
    assert mark["version"] == 2
    archive = ThreadArchive(persistence.store, thread_id)
    ids_before = [ids_of(record_messages(r)) for r in archive.records()]

    done = redact_archive(
        persistence.store, thread_id, Redactor.for_text(SECRET), mark, receipt_id="r-pg", at=AT
    )
    assert done.mark is not None
    graph.update_state(config, {"compaction": done.mark})

    assert done.counts.get(1, 0) >= 1
    assert SECRET not in json.dumps(archive.records())
    assert [ids_of(record_messages(r)) for r in archive.records()] == ids_before
    out = io.StringIO()
    assert verify_thread_command(persistence, thread_id, out) == 0
    assert out.getvalue() == (
        f"thread {thread_id}: intact (2 compaction versions verified against the thread "
        f"state), 1 redaction: {AT} text in "
        + ", ".join(f"v{version}" for version in sorted(done.counts))
        + "\n"
    )
    shown = io.StringIO()
    show_thread(persistence, thread_id, shown)
    assert "does not verify" not in shown.getvalue()
    assert TAMPERED not in shown.getvalue()
    assert f"Note 1: my {REDACTION_MARKER} is on file." in shown.getvalue()
    # The thread goes on: the next compaction links to the redacted chain.
    for _ in range(12):
        graph.invoke({"messages": [HumanMessage(FILLER)]}, config, context=CTX)
        if graph.get_state(config).values["compaction"]["version"] == 3:
            break
    report = verify_thread(
        persistence.store, thread_id, graph.get_state(config).values["compaction"]
    )
    assert (report.ok, report.versions_checked, len(report.redactions)) == (True, 3, 1)
