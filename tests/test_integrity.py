"""Checksums, the hash chain and the archive catch every kind of tampering."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.state.summary import (
    CHAIN_SEED,
    SUMMARY_SCHEMA_VERSION,
    canonical_json,
    canonical_message,
    chain_hash,
    checksum,
)
from ctxgraph.store.namespaces import thread_archive, thread_artifacts
from ctxgraph.store.persistence.archive import (
    ArchiveConflictError,
    ArchiveRecord,
    ThreadArchive,
    VerifyReport,
    averify_thread,
    build_record,
    committed_version,
    tampered_versions,
    verify_records,
    verify_thread,
)

MARK_FIELDS = ("version", "cursor", "checksum", "chain_hash")


def folded(version: int) -> list[BaseMessage]:
    """Four messages (with a tool call) that compaction version ``version`` folds."""
    question = "Where is the Lighthouse?" if version == 2 else f"Question {version}?"
    return [
        HumanMessage(question, id=f"h{version}"),
        AIMessage(
            content="",
            id=f"a{version}",
            tool_calls=[{"name": "calc", "args": {"x": version}, "id": f"c{version}"}],
        ),
        ToolMessage(str(version * 10), tool_call_id=f"c{version}", id=f"t{version}"),
        AIMessage(f"Answer {version}", id=f"r{version}"),
    ]


def summary(version: int) -> dict[str, Any]:
    return {"schema_version": SUMMARY_SCHEMA_VERSION, "text": f"summary through {version}"}


def make_records(count: int) -> list[ArchiveRecord]:
    records: list[ArchiveRecord] = []
    previous_hash, cursor = CHAIN_SEED, 0
    for version in range(1, count + 1):
        record = build_record(
            version=version,
            messages=folded(version),
            summary=summary(version),
            previous_cursor=cursor,
            previous_chain_hash=previous_hash,
        )
        records.append(record)
        previous_hash, cursor = record["chain_hash"], record["cursor"]
    return records


def mark_of(record: ArchiveRecord) -> dict[str, Any]:
    return {name: record[name] for name in MARK_FIELDS}


def build_archive(
    store: BaseStore, thread_id: str, count: int = 4
) -> tuple[ThreadArchive, dict[str, Any]]:
    archive = ThreadArchive(store, thread_id)
    records = make_records(count)
    for record in records:
        archive.put(record)
    return archive, mark_of(records[-1])


def stored_value(store: BaseStore, thread_id: str, version: int) -> dict[str, Any]:
    item = store.get(thread_archive(thread_id), f"v{version:06d}")
    assert item is not None
    return copy.deepcopy(item.value)


def overwrite(store: BaseStore, thread_id: str, version: int, value: dict[str, Any]) -> None:
    store.put(thread_archive(thread_id), f"v{version:06d}", value)


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> BaseStore:
    if request.param == "memory":
        return InMemoryStore()
    return request.getfixturevalue("persistence").store


# --- checksums and the chain ---------------------------------------------------------------


def test_checksum_ignores_key_order_and_tracks_every_input() -> None:
    one = {"schema_version": 1, "text": "hello", "facts": ["a", "b"]}
    same = {"facts": ["a", "b"], "text": "hello", "schema_version": 1}
    base = checksum(one, 4, ["m1", "m2"])

    assert checksum(same, 4, ["m1", "m2"]) == base
    assert checksum({**one, "text": "hello!"}, 4, ["m1", "m2"]) != base
    assert checksum(one, 5, ["m1", "m2"]) != base
    assert checksum(one, 4, ["m2", "m1"]) != base
    assert checksum(one, 4, ["m1"]) != base
    assert checksum({**one, "schema_version": 2}, 4, ["m1", "m2"]) != base


def test_checksum_canonical_form_is_locked() -> None:
    value = {"schema_version": 1, "facts": ["café"]}
    expected_bytes = (
        b'{"cursor":3,"event_ids":["m1","m2"],"schema_version":1,'
        b'"summary":{"facts":["caf\xc3\xa9"],"schema_version":1}}'
    )
    independent = hashlib.sha256(expected_bytes).hexdigest()

    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()
    assert independent == "5f174737ecda7c957c6a714c14d1475b0a6143ff745b2420eaa81d2a1a347e4c"
    assert checksum(value, 3, ["m1", "m2"]) == independent


def test_canonical_message_keeps_defining_parts_only() -> None:
    call = AIMessage(
        content="",
        id="a1",
        tool_calls=[{"name": "calc", "args": {"x": 1}, "id": "c1"}],
        response_metadata={"model": "ignored"},
    )
    result = ToolMessage("10", tool_call_id="c1", id="t1", name="calc")

    assert canonical_message(call) == {
        "id": "a1",
        "type": "ai",
        "tool_calls": [{"id": "c1", "name": "calc", "args": {"x": 1}}],
    }
    assert canonical_message(result) == {
        "id": "t1",
        "type": "tool",
        "content": "10",
        "name": "calc",
        "tool_call_id": "c1",
        "status": "success",
    }


def test_chain_hash_detects_reorder_edit_and_drop() -> None:
    messages = folded(1)
    base = chain_hash(CHAIN_SEED, messages)
    edited = [*messages[:3], AIMessage("Answer 1!", id="r1")]

    assert hashlib.sha256(b"ctxgraph/chain/v1").hexdigest() == CHAIN_SEED
    assert chain_hash(CHAIN_SEED, []) == CHAIN_SEED
    assert chain_hash(CHAIN_SEED, list(messages)) == base
    assert chain_hash(CHAIN_SEED, [messages[1], messages[0], *messages[2:]]) != base
    assert chain_hash(CHAIN_SEED, edited) != base
    assert chain_hash(CHAIN_SEED, messages[:3]) != base
    assert chain_hash(CHAIN_SEED, messages[1:]) != base
    # Chaining in two steps equals chaining in one: versions continue the same chain.
    assert chain_hash(chain_hash(CHAIN_SEED, messages[:2]), messages[2:]) == base


def test_build_record_computes_ids_cursor_and_hashes() -> None:
    first, second = make_records(2)

    assert second["event_ids"] == ["h2", "a2", "t2", "r2"]
    assert (first["cursor"], second["cursor"]) == (4, 8)
    assert second["previous_chain_hash"] == first["chain_hash"]
    assert second["chain_hash"] == chain_hash(first["chain_hash"], folded(2))
    assert second["checksum"] == checksum(summary(2), 8, ["h2", "a2", "t2", "r2"])
    assert second["created_at"].endswith("+00:00")


def test_build_record_rejects_messages_without_ids() -> None:
    with pytest.raises(ValueError, match=r"message 1 .*no id"):
        build_record(
            version=1,
            messages=[HumanMessage("hi", id="h1"), AIMessage("yo")],
            summary=summary(1),
            previous_cursor=0,
            previous_chain_hash=CHAIN_SEED,
        )


def test_namespaces_validate_thread_ids() -> None:
    assert thread_archive("t1") == ("threads", "t1", "archive")
    assert thread_artifacts("t1") == ("threads", "t1", "artifacts")
    with pytest.raises(ValueError, match=r"'a\.b'"):
        thread_archive("a.b")
    with pytest.raises(ValueError, match="thread_id must be 1-128 characters"):
        thread_artifacts("")


# --- the archive on both stores -------------------------------------------------------------


def test_intact_archive_verifies(store: BaseStore, thread_id: str) -> None:
    archive, mark = build_archive(store, thread_id)

    report = verify_thread(store, thread_id, mark)

    assert report.ok, report.reason
    assert (report.versions_checked, report.first_broken_version, report.reason) == (4, None, None)
    assert [record["version"] for record in archive.records()] == [1, 2, 3, 4]
    latest = archive.latest()
    assert latest is not None and mark_of(latest) == mark


def test_tampered_content_breaks_its_version(store: BaseStore, thread_id: str) -> None:
    _, mark = build_archive(store, thread_id)
    value = stored_value(store, thread_id, 2)
    value["messages"][3]["data"]["content"] = "A different answer"
    overwrite(store, thread_id, 2, value)

    report = verify_thread(store, thread_id, mark)

    assert not report.ok
    assert report.first_broken_version == 2
    assert report.versions_checked == 1
    assert report.reason is not None and "chain hash" in report.reason


def test_deleted_version_is_missing(store: BaseStore, thread_id: str) -> None:
    _, mark = build_archive(store, thread_id)
    store.delete(thread_archive(thread_id), "v000003")

    report = verify_thread(store, thread_id, mark)

    assert not report.ok
    assert report.first_broken_version == 3
    assert report.reason == "version 3 is missing from the archive"


def test_reordered_messages_break_their_version(store: BaseStore, thread_id: str) -> None:
    _, mark = build_archive(store, thread_id)
    value = stored_value(store, thread_id, 2)
    value["messages"][0], value["messages"][1] = value["messages"][1], value["messages"][0]
    overwrite(store, thread_id, 2, value)

    report = verify_thread(store, thread_id, mark)

    assert not report.ok
    assert report.first_broken_version == 2
    assert report.reason is not None and "reordered" in report.reason


def test_swapped_records_break_the_first_of_them(store: BaseStore, thread_id: str) -> None:
    _, mark = build_archive(store, thread_id)
    second, third = stored_value(store, thread_id, 2), stored_value(store, thread_id, 3)
    overwrite(store, thread_id, 2, third)
    overwrite(store, thread_id, 3, second)

    report = verify_thread(store, thread_id, mark)

    assert not report.ok
    assert report.first_broken_version == 2
    assert report.reason is not None and "labelled version 3" in report.reason


def test_mark_that_disagrees_with_archive_is_broken(store: BaseStore, thread_id: str) -> None:
    _, mark = build_archive(store, thread_id)

    wrong_cursor = verify_thread(store, thread_id, {**mark, "cursor": mark["cursor"] + 1})
    wrong_hash = verify_thread(store, thread_id, {**mark, "chain_hash": CHAIN_SEED})
    ahead = verify_thread(store, thread_id, {**mark, "version": 6})
    # A mark at version 2 that carries version 4's hashes: versions 3 and 4 are above the
    # commit point, so the mark must match version 2, and does not.
    behind = verify_thread(store, thread_id, {**mark, "version": 2})

    assert (wrong_cursor.ok, wrong_cursor.first_broken_version) == (False, 4)
    assert wrong_cursor.reason is not None and "thread state" in wrong_cursor.reason
    assert "cursor 17 in the thread state, 16 archived" in wrong_cursor.reason
    assert (wrong_hash.ok, wrong_hash.first_broken_version) == (False, 4)
    assert wrong_hash.reason is not None and "chain_hash" in wrong_hash.reason
    assert (ahead.ok, ahead.first_broken_version) == (False, 5)
    assert ahead.reason is not None and ahead.reason.startswith("version 5 is missing")
    assert (behind.ok, behind.first_broken_version, behind.prepared) == (False, 2, (3, 4))
    assert behind.reason is not None and "thread state" in behind.reason


def test_put_is_idempotent_and_refuses_conflicts(store: BaseStore, thread_id: str) -> None:
    archive, _ = build_archive(store, thread_id, count=1)
    original = archive.get(1)
    assert original is not None

    archive.put({**original, "created_at": "2000-01-01T00:00:00+00:00"})
    conflicting = build_record(
        version=1,
        messages=folded(1),
        summary={"schema_version": 1, "text": "rewritten history"},
        previous_cursor=0,
        previous_chain_hash=CHAIN_SEED,
    )
    with pytest.raises(ArchiveConflictError, match="version 1 "):
        archive.put(conflicting)

    assert archive.get(1) == original
    assert archive.get(2) is None


def test_records_paginates_past_any_page_size(store: BaseStore, thread_id: str) -> None:
    archive, mark = build_archive(store, thread_id, count=30)
    small_pages = ThreadArchive(store, thread_id, page_size=7)

    assert [record["version"] for record in archive.records()] == list(range(1, 31))
    assert [record["version"] for record in small_pages.records()] == list(range(1, 31))
    latest = small_pages.latest()
    assert latest is not None and latest["version"] == 30
    assert verify_thread(store, thread_id, mark).versions_checked == 30


def test_search_messages_is_case_insensitive_and_newest_first(
    store: BaseStore, thread_id: str
) -> None:
    archive, _ = build_archive(store, thread_id)

    found = archive.search_messages("LIGHTHOUSE", limit=5)
    answers = archive.search_messages("answer", limit=2)

    assert [(version, message.id) for version, message in found] == [(2, "h2")]
    assert found[0][1].content == "Where is the Lighthouse?"
    assert [(version, message.id) for version, message in answers] == [(4, "r4"), (3, "r3")]
    assert archive.search_messages("nowhere", limit=5) == []


# --- each check of verify_records, on plain records -------------------------------------


def tampered(field: str, value: object) -> list[ArchiveRecord]:
    records = make_records(3)
    records[1] = {**records[1], field: value}  # type: ignore[typeddict-item]
    return records


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("previous_chain_hash", CHAIN_SEED, "version 2 does not link to version 1's chain hash"),
        ("event_ids", ["h2", "a2", "t2", "x2"], "version 2's event_ids do not match"),
        ("cursor", 9, "version 2's cursor is 9, expected 4 + 4 messages = 8"),
        ("summary", {"schema_version": 1, "text": "forged"}, "version 2's checksum"),
        ("checksum", "0" * 64, "version 2's checksum"),
        ("version", 7, "version 2 is missing from the archive"),
        ("messages", "not a list", "no valid 'messages' field"),
    ],
)
def test_each_record_check_reports_version_two(field: str, value: object, reason: str) -> None:
    records = make_records(3)
    assert verify_records(records, mark_of(records[-1])).ok

    report = verify_records(tampered(field, value), None)

    assert (report.ok, report.first_broken_version, report.versions_checked) == (False, 2, 1)
    assert report.reason is not None and reason in report.reason


def test_first_record_must_start_from_the_seed() -> None:
    records = make_records(2)
    records[0] = {**records[0], "previous_chain_hash": "f" * 64}

    report = verify_records(records, None)

    assert (report.first_broken_version, report.reason) == (
        1,
        "version 1 does not link to the chain seed (previous_chain_hash differs)",
    )


def test_empty_archive_verifies_without_a_mark_or_with_mark_zero() -> None:
    assert verify_records([], None).ok
    assert verify_records([], {"version": 0}).ok
    missing = verify_records([], {"version": 1})
    assert (missing.ok, missing.first_broken_version) == (False, 1)


# --- async ---------------------------------------------------------------------------------


async def test_async_archive_on_memory_store(thread_id: str) -> None:
    store = InMemoryStore()
    archive = ThreadArchive(store, thread_id, page_size=3)
    records = make_records(8)

    assert await archive.alatest() is None
    for record in records:
        await archive.aput(record)
    await archive.aput(records[0])
    with pytest.raises(ArchiveConflictError):
        await archive.aput({**records[1], "chain_hash": CHAIN_SEED})

    listed = await archive.arecords()
    latest = await archive.alatest()
    assert [record["version"] for record in listed] == list(range(1, 9))
    assert await archive.aget(2) == records[1]
    assert latest is not None and latest["version"] == 8
    assert verify_records(listed, mark_of(records[-1])).ok


# --- committed and prepared versions ---------------------------------------------------------


def prepared_record(version: int, text: str, previous: ArchiveRecord) -> ArchiveRecord:
    """A record of ``version`` that continues ``previous``, as a compaction prepares it."""
    return build_record(
        version=version,
        messages=[HumanMessage(text, id=f"p{version}-{len(text)}")],
        summary={"schema_version": 1, "text": text},
        previous_cursor=previous["cursor"],
        previous_chain_hash=previous["chain_hash"],
    )


def test_put_replaces_a_prepared_version_and_never_a_committed_one(
    store: BaseStore, thread_id: str
) -> None:
    archive, _ = build_archive(store, thread_id, count=2)
    second = archive.get(2)
    assert second is not None
    crashed = prepared_record(3, "an attempt that crashed", second)
    retried = prepared_record(3, "the attempt that committed", second)

    archive.put(crashed, committed_version=2)
    archive.put(retried, committed_version=2)  # above the mark: the leftover is replaced
    assert archive.get(3) == retried
    archive.put(retried, committed_version=3)  # the same record once committed: a no-op

    with pytest.raises(ArchiveConflictError, match="committed versions are never overwritten"):
        archive.put(crashed, committed_version=3)
    with pytest.raises(ArchiveConflictError):
        archive.put(crashed)  # without a mark, every stored version counts as committed
    rewritten = {**make_records(2)[1], "summary": summary(9)}
    rewritten["checksum"] = checksum(summary(9), rewritten["cursor"], rewritten["event_ids"])
    with pytest.raises(ArchiveConflictError, match="version 2 "):
        archive.put(rewritten, committed_version=2)
    assert archive.get(3) == retried
    assert archive.get(2) == second


def test_readers_given_the_mark_leave_prepared_versions_out(
    store: BaseStore, thread_id: str
) -> None:
    archive, mark = build_archive(store, thread_id, count=2)
    latest = archive.get(2)
    assert latest is not None
    archive.put(prepared_record(3, "Lighthouse leftover", latest), committed_version=2)

    assert committed_version(mark) == 2
    assert committed_version(None) == 0
    assert committed_version({"version": "2"}) is None
    assert [v for v, _ in archive.versioned()] == [1, 2, 3]
    assert [v for v, _ in archive.versioned(upto=2)] == [1, 2]
    assert [r["version"] for r in archive.records(upto=2)] == [1, 2]
    assert [r["version"] for r in archive.records(upto=0)] == []
    last = archive.latest(upto=2)
    assert last is not None and last["version"] == 2
    hits = archive.search_messages("lighthouse", limit=5, upto=2)
    assert [(v, m.id) for v, m in hits] == [(2, "h2")]
    assert [v for v, _ in archive.search_messages("lighthouse", limit=5)] == [3, 2]


def test_verify_names_prepared_versions_and_passes(store: BaseStore, thread_id: str) -> None:
    archive, mark = build_archive(store, thread_id, count=2)
    latest = archive.get(2)
    assert latest is not None
    archive.put(prepared_record(3, "leftover", latest), committed_version=2)
    store.put(thread_archive(thread_id), "v000004", {"not": "a record"})

    report = verify_thread(store, thread_id, mark)
    first = verify_thread(store, thread_id, None)  # the first compaction never committed

    assert report == VerifyReport(True, 2, None, None, prepared=(3, 4))
    assert (first.ok, first.versions_checked, first.prepared) == (True, 0, (1, 2, 3, 4))


async def test_async_readers_and_put_follow_the_mark(thread_id: str) -> None:
    store = InMemoryStore()
    archive = ThreadArchive(store, thread_id)
    records = make_records(2)
    await archive.aput(records[0], committed_version=0)
    await archive.aput(records[1], committed_version=1)
    await archive.aput(prepared_record(3, "one", records[1]), committed_version=2)
    retried = prepared_record(3, "two", records[1])
    await archive.aput(retried, committed_version=2)

    assert await archive.aget(3) == retried
    with pytest.raises(ArchiveConflictError):
        await archive.aput(prepared_record(3, "three", records[1]), committed_version=3)
    assert [v for v, _ in await archive.aversioned(upto=2)] == [1, 2]
    assert [r["version"] for r in await archive.arecords(upto=1)] == [1]
    assert await archive.asearch_messages("two", limit=3, upto=2) == []
    report = await averify_thread(store, thread_id, mark_of(records[1]))
    assert report == VerifyReport(True, 2, None, None, prepared=(3,))


# --- modified records, each one named ------------------------------------------------------


def test_tampered_versions_names_each_modified_record(store: BaseStore, thread_id: str) -> None:
    archive, mark = build_archive(store, thread_id)
    assert tampered_versions(archive.versioned(), mark) == {}

    edited = stored_value(store, thread_id, 2)
    edited["messages"][0]["data"]["content"] = "Where is the Lighthouse now?"
    overwrite(store, thread_id, 2, edited)
    resummarized = stored_value(store, thread_id, 3)
    resummarized["summary"] = summary(30)
    overwrite(store, thread_id, 3, resummarized)

    found = tampered_versions(archive.versioned(), mark)

    assert sorted(found) == [2, 3]
    assert "version 2's messages do not match its chain hash" in found[2]
    assert "version 3's checksum does not match" in found[3]
    # A record checked on its own, without its neighbours, is still caught.
    alone = tampered_versions([(2, archive.versioned()[1][1])])
    assert list(alone) == [2]


def test_a_record_forged_with_fresh_hashes_shows_at_its_next_link(
    store: BaseStore, thread_id: str
) -> None:
    archive, mark = build_archive(store, thread_id)
    records = make_records(2)
    forged_messages = [HumanMessage("Forged question?", id="h3"), *folded(3)[1:]]
    forged = build_record(
        version=3,
        messages=forged_messages,
        summary=summary(3),
        previous_cursor=records[1]["cursor"],
        previous_chain_hash=records[1]["chain_hash"],
    )
    overwrite(store, thread_id, 3, dict(forged))
    found = tampered_versions(archive.versioned(), mark)
    assert list(found) == [4]
    assert "version 4 does not link to version 3's chain hash" in found[4]

    # Forge version 4 on top of the forged 3 too: the chain holds, the thread's mark does not.
    forged_last = build_record(
        version=4,
        messages=[HumanMessage("Forged last", id="h4")],
        summary=summary(4),
        previous_cursor=forged["cursor"],
        previous_chain_hash=forged["chain_hash"],
    )
    overwrite(store, thread_id, 4, dict(forged_last))
    found = tampered_versions(archive.versioned(), mark)
    assert list(found) == [4]
    assert "the thread state disagrees with version 4" in found[4]


def test_a_missing_version_is_not_a_modified_record(store: BaseStore, thread_id: str) -> None:
    archive, mark = build_archive(store, thread_id)
    store.delete(thread_archive(thread_id), "v000002")

    assert tampered_versions(archive.versioned(), mark) == {}
    assert not verify_thread(store, thread_id, mark).ok
