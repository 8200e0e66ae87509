"""The thread artifact store: exact, chunked, idempotent, verified writes and bounded pages."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langgraph.store.base import BaseStore, GetOp, Op, PutOp, Result, SearchOp
from langgraph.store.memory import InMemoryStore

from ctxgraph.state.tokens import count_text
from ctxgraph.store.artifacts import (
    CHUNK_BYTES,
    LINE_WINDOW,
    MIN_PAGE_TOKENS,
    WINDOW_BYTES,
    Artifact,
    ArtifactStore,
    ArtifactWriteError,
    DamagedArtifactError,
    InvalidPatternError,
    Page,
    UnknownArtifactError,
    reconstruct,
)
from ctxgraph.store.artifacts.items import chunk_key
from ctxgraph.store.artifacts.layout import windows
from tests.support.stores import BACKENDS, async_backend

# --- helpers ----------------------------------------------------------------------------


class Recording(BaseStore):
    """Passes every op to ``inner`` and records it; ``tamper`` may rewrite or drop puts."""

    def __init__(
        self, inner: BaseStore, tamper: Callable[[PutOp], PutOp | None] | None = None
    ) -> None:
        self.inner = inner
        self.tamper = tamper
        self.ops: list[Op] = []

    def _send(self, ops: Iterable[Op]) -> tuple[list[Op], list[int]]:
        ops = list(ops)
        self.ops.extend(ops)
        sent: list[Op] = []
        kept: list[int] = []
        for index, op in enumerate(ops):
            if isinstance(op, PutOp) and self.tamper is not None:
                changed = self.tamper(op)
                if changed is None:
                    continue
                op = changed
            sent.append(op)
            kept.append(index)
        return sent, kept

    @staticmethod
    def _merge(count: int, kept: list[int], results: list[Result]) -> list[Result]:
        merged: list[Result] = [None] * count
        for index, result in zip(kept, results, strict=True):
            merged[index] = result
        return merged

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        sent, kept = self._send(ops)
        results = self.inner.batch(sent) if sent else []
        return self._merge(len(ops), kept, results)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        sent, kept = self._send(ops)
        results = await self.inner.abatch(sent) if sent else []
        return self._merge(len(ops), kept, results)

    def puts(self) -> list[PutOp]:
        return [op for op in self.ops if isinstance(op, PutOp)]

    def get_keys(self) -> list[str]:
        return [op.key for op in self.ops if isinstance(op, GetOp)]


class Clock:
    """A clock that moves one second per reading."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def pages_of(
    artifacts: ArtifactStore, ref: str, *, limit: int = 200, max_tokens: int = 4_000
) -> list[Page]:
    """Follow next_offset from 0 to the end."""
    pages: list[Page] = []
    offset: int | None = 0
    while offset is not None:
        page = artifacts.read_page(ref, offset, limit, max_tokens=max_tokens)
        pages.append(page)
        assert page.next_offset is None or page.next_offset > offset
        offset = page.next_offset
        assert len(pages) < 10_000
    return pages


ROW = re.compile(r"^(\d+)(\+?)\t(.*)$", re.DOTALL)


def rebuild(texts: list[str]) -> str:
    """The documented format, parsed independently of ``reconstruct``: a model's view."""
    rows: list[tuple[int, bool, str]] = []
    final_newline = False
    for text in texts:
        for line in text.split("\n"):
            if line.startswith("[artifact "):
                final_newline = line.endswith("final newline: yes]")
            elif (found := ROW.match(line)) is not None:
                rows.append((int(found.group(1)), found.group(2) == "+", found.group(3)))
    assert [number for number, _, _ in rows] == list(range(len(rows)))
    out = ""
    for number, continues, text in rows:
        out += ("" if continues or number == 0 else "\n") + text
    return out + ("\n" if final_newline and rows else "")


def shown_offsets(page: Page) -> list[int]:
    return [int(m.group(1)) for m in (ROW.match(x) for x in page.text.split("\n")) if m]


TWO_MB = "".join(f"{i:07d} the quick brown fox jumps over the lazy dog\n" for i in range(40_000))
CHINESE = "".join(f"第{i}行：上下文卸载把大的工具结果移出对话。\n" for i in range(2_000))
ONE_MB_LINE = "".join(chr(ord("a") + i % 26) for i in range(1_000_000))

MIX = {
    "empty": "",
    "one newline": "\n",
    "newlines only": "\n\n\n",
    "no trailing newline": "alpha\nbeta\ngamma",
    "trailing newline": "alpha\nbeta\n",
    "crlf": "first\r\nsecond\r\n\r\nlast\r\n",
    "lone cr": "progress 10%\rprogress 50%\rdone\n",
    "tabs": "\tindented\n\t\tmore\tinner\ttabs\n",
    "empty lines": "a\n\n\nb\n\n",
    "chinese and emoji": "中文测试🙂👍🏽\n第二行 emoji 👨‍👩‍👧‍👦 family\n",
    "unicode breaks": "a\u2028b\u2029c\x85d\x0be\x0cf\n",
    "header look-alike": "[artifact art-x: final newline: yes]\n3\tfake row\n",
    "exact window": "w" * LINE_WINDOW + "\n" + "v" * (LINE_WINDOW + 1),
    "emoji window": "😀" * 2_000 + "\n",
    "long then short": "L" * 5_000 + "\nshort\n" + "M" * 4_001,
    "1 MB line": ONE_MB_LINE,
    "2 MB lines": TWO_MB,
    "nul": "before\x00after\n",
}


# --- refs and records -------------------------------------------------------------------


def test_ref_for_is_deterministic_and_hashes_ids_of_any_length() -> None:
    ref = ArtifactStore.ref_for("tool_result", "call_1")
    assert re.fullmatch(r"art-[0-9a-f]{24}", ref)
    digest = hashlib.sha256(b"tool_result\0call_1\0").hexdigest()
    assert ref == f"art-{digest[:24]}"
    assert ArtifactStore.ref_for("tool_result", "call_1") == ref
    assert ArtifactStore.ref_for("tool_args", "call_1") != ref
    assert ArtifactStore.ref_for("tool_result", "call_1", part="x") != ref
    assert re.fullmatch(r"art-[0-9a-f]{24}", ArtifactStore.ref_for("user_input", "m" * 10_000))
    with pytest.raises(ValueError, match="artifact kind must be one of"):
        ArtifactStore.ref_for("file", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty source id"):
        ArtifactStore.ref_for("tool_result", "")


def test_put_get_read_text_roundtrip(backend: BaseStore, thread_id: str) -> None:
    artifacts = ArtifactStore(backend, thread_id)
    content = "line one\nline two\n第三行 🙂\n"
    artifact = artifacts.put("tool_result", content, source_id="call-1", tool_name="shell")
    data = content.encode()
    assert artifact.ref == ArtifactStore.ref_for("tool_result", "call-1")
    assert (artifact.kind, artifact.tool_name, artifact.call_id) == (
        "tool_result",
        "shell",
        "call-1",
    )
    assert artifact.size_bytes == len(data)
    assert artifact.sha256 == hashlib.sha256(data).hexdigest()
    assert artifact.tokens == count_text(content)
    assert artifact.lines == 3
    assert artifact.chunks == 1
    created = datetime.fromisoformat(artifact.created_at)
    assert created.utcoffset() == timedelta(0)
    assert artifacts.get(artifact.ref) == artifact
    assert artifacts.read_text(artifact.ref) == content
    assert artifacts.list() == [artifact]
    # Every write skips the vector index.
    spy = Recording(backend)
    ArtifactStore(spy, thread_id).put("user_input", "x" * 300_000, source_id="m1")
    assert spy.puts() and all(op.index is False for op in spy.puts() if op.value is not None)


def test_tokens_given_by_the_caller_are_kept(thread_id: str) -> None:
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    assert artifacts.put("tool_args", "{}", source_id="c", tokens=7).tokens == 7


def test_other_threads_do_not_see_an_artifact(backend: BaseStore, thread_id: str) -> None:
    ref = ArtifactStore(backend, thread_id).put("tool_result", "secret", source_id="c").ref
    other = ArtifactStore(backend, thread_id + "-other")
    assert other.get(ref) is None
    with pytest.raises(UnknownArtifactError, match=ref):
        other.read_text(ref)


def test_unknown_and_malformed_refs_are_named(thread_id: str) -> None:
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    missing = "art-0123456789abcdef01234567"
    assert artifacts.get(missing) is None
    assert artifacts.get("not a ref") is None
    with pytest.raises(UnknownArtifactError) as raised:
        artifacts.read_text(missing)
    message = str(raised.value)
    assert f"no artifact '{missing}' in this thread" in message
    assert "ArtifactStore.list()" in message and "24 hex digits" in message
    assert isinstance(raised.value, LookupError)
    with pytest.raises(UnknownArtifactError, match="no artifact 'art-xyz'"):
        artifacts.read_page("art-xyz")
    with pytest.raises(UnknownArtifactError, match="no artifact"):
        artifacts.grep("../../etc", "x")
    long_ref = "x" * 10_000
    with pytest.raises(UnknownArtifactError) as raised:
        artifacts.read_text(long_ref)
    assert len(str(raised.value)) < 400


# --- chunking ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content", [TWO_MB, ONE_MB_LINE, CHINESE * 40], ids=["2MB", "1MB-line", "zh"]
)
def test_large_content_is_chunked_and_reads_back_exactly(
    backend: BaseStore, thread_id: str, content: str
) -> None:
    artifacts = ArtifactStore(backend, thread_id)
    artifact = artifacts.put("tool_result", content, source_id="big", tool_name="dump")
    assert artifact.chunks > 1
    assert artifact.size_bytes == len(content.encode())
    assert artifacts.read_text(artifact.ref) == content
    assert artifacts.get(artifact.ref) == artifact
    namespace = ("threads", thread_id, "artifacts")
    meta = backend.get(namespace, artifact.ref)
    assert meta is not None and "body" not in meta.value
    table = meta.value["table"]
    assert len(table) == artifact.chunks
    assert table[0]["first"] == 0
    texts = []
    for index, entry in enumerate(table):
        item = backend.get(namespace, chunk_key(artifact.ref, index))
        assert item is not None
        text = item.value["body"]
        assert len(text.encode()) == entry["size"] <= CHUNK_BYTES
        texts.append(text)
        if index:
            assert entry["first"] == table[index - 1]["first"] + table[index - 1]["rows"]
    assert "".join(texts) == content


def test_an_early_page_reads_only_the_first_chunk(backend: BaseStore, thread_id: str) -> None:
    ref = ArtifactStore(backend, thread_id).put("tool_result", TWO_MB, source_id="big").ref
    spy = Recording(backend)
    artifacts = ArtifactStore(spy, thread_id)
    page = artifacts.read_page(ref, 0, 50)
    assert spy.get_keys() == [ref, chunk_key(ref, 0)]
    assert all(isinstance(op, GetOp) for op in spy.ops)
    assert shown_offsets(page) == list(range(50))
    assert page.text.split("\n")[2] == "0\t0000000 the quick brown fox jumps over the lazy dog"
    # A page near the end loads only the last chunk.
    artifact = artifacts.get(ref)
    assert artifact is not None
    spy.ops.clear()
    total = page.total_lines
    last = artifacts.read_page(ref, total - 5, 50)
    assert spy.get_keys() == [ref, chunk_key(ref, artifact.chunks - 1)]
    assert last.next_offset is None
    assert shown_offsets(last) == list(range(total - 5, total))


def test_a_page_that_crosses_a_chunk_boundary_loads_both(thread_id: str) -> None:
    inner = InMemoryStore()
    artifacts = ArtifactStore(inner, thread_id)
    artifact = artifacts.put("tool_result", TWO_MB, source_id="big")
    item = inner.get(("threads", thread_id, "artifacts"), artifact.ref)
    assert item is not None
    boundary = item.value["table"][1]["first"]
    spy = Recording(inner)
    page = ArtifactStore(spy, thread_id).read_page(artifact.ref, boundary - 3, 6)
    assert spy.get_keys() == [artifact.ref, chunk_key(artifact.ref, 0), chunk_key(artifact.ref, 1)]
    assert shown_offsets(page) == list(range(boundary - 3, boundary + 3))
    lines = TWO_MB.split("\n")
    assert page.text.split("\n")[2:8] == [
        f"{n}\t{lines[n]}" for n in range(boundary - 3, boundary + 3)
    ]


def test_content_with_nul_characters_is_stored(backend: BaseStore, thread_id: str) -> None:
    # Postgres jsonb refuses "\u0000"; such bodies are encoded (store.text_codec).
    content = "binary\x00junk\n" * 30_000
    artifacts = ArtifactStore(backend, thread_id)
    for source, text in [("small", "a\x00b"), ("big", content)]:
        artifact = artifacts.put("tool_result", text, source_id=source)
        assert artifacts.read_text(artifact.ref) == text
        assert rebuild([p.text for p in pages_of(artifacts, artifact.ref, limit=1_000)]) == text


def test_lone_surrogates_are_stored_exactly(backend: BaseStore, thread_id: str) -> None:
    artifacts = ArtifactStore(backend, thread_id)
    long_line = ("bad \udc80 text \ufdd0 " * 20_000) + "\n"  # windows cut near surrogates
    for source, text in [("small", "bad \udc80 text"), ("big", long_line * 3)]:
        artifact = artifacts.put("tool_result", text, source_id=source)
        assert artifacts.read_text(artifact.ref) == text
        assert rebuild([p.text for p in pages_of(artifacts, artifact.ref, limit=1_000)]) == text


# --- idempotency ------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["small result\n", TWO_MB], ids=["inline", "chunked"])
def test_a_replayed_put_writes_nothing(backend: BaseStore, thread_id: str, content: str) -> None:
    spy = Recording(backend)
    artifacts = ArtifactStore(spy, thread_id, clock=Clock())
    first = artifacts.put("tool_result", content, source_id="call-7", tool_name="t")
    assert spy.puts()
    spy.ops.clear()
    again = artifacts.put("tool_result", content, source_id="call-7", tool_name="t")
    assert again == first
    assert spy.puts() == []
    assert artifacts.read_text(first.ref) == content


def test_new_content_under_the_same_source_replaces_it(backend: BaseStore, thread_id: str) -> None:
    artifacts = ArtifactStore(backend, thread_id, clock=Clock())
    big = artifacts.put("tool_result", TWO_MB, source_id="call-8")
    small = artifacts.put("tool_result", "the tool answered differently\n", source_id="call-8")
    assert small.ref == big.ref
    assert small.sha256 != big.sha256 and small.chunks == 1
    assert small.created_at > big.created_at
    assert artifacts.read_text(small.ref) == "the tool answered differently\n"
    namespace = ("threads", thread_id, "artifacts")
    assert all(backend.get(namespace, chunk_key(big.ref, i)) is None for i in range(big.chunks))
    assert artifacts.list() == [small]
    bigger = artifacts.put("tool_result", TWO_MB + "more\n", source_id="call-8")
    assert artifacts.read_text(bigger.ref) == TWO_MB + "more\n"


def test_a_damaged_copy_is_repaired_by_the_replay(thread_id: str) -> None:
    inner = InMemoryStore()
    artifacts = ArtifactStore(inner, thread_id)
    artifact = artifacts.put("tool_result", TWO_MB, source_id="c")
    namespace = ("threads", thread_id, "artifacts")
    inner.delete(namespace, chunk_key(artifact.ref, 2))
    with pytest.raises(DamagedArtifactError, match=rf"{artifact.ref} is damaged: chunk 2"):
        artifacts.read_text(artifact.ref)
    repaired = artifacts.put("tool_result", TWO_MB, source_id="c")
    assert repaired.sha256 == artifact.sha256
    assert artifacts.read_text(artifact.ref) == TWO_MB


# --- read-back failures -----------------------------------------------------------------


def _drop_all(op: PutOp) -> PutOp | None:
    return None


def _drop_chunks(op: PutOp) -> PutOp | None:
    return None if "/" in op.key else op


def _flip_chunk(op: PutOp) -> PutOp | None:
    if "/" not in op.key or op.value is None:
        return op
    body = op.value["body"]
    return PutOp(op.namespace, op.key, {**op.value, "body": body[:-1] + "?"}, index=False)


def _shrink_record(op: PutOp) -> PutOp | None:
    if "/" in op.key or op.value is None:
        return op
    return PutOp(op.namespace, op.key, {**op.value, "size_bytes": 1}, index=False)


def _flip_inline(op: PutOp) -> PutOp | None:
    if op.value is None or "body" not in op.value:
        return op
    return PutOp(op.namespace, op.key, {**op.value, "body": "tampered"}, index=False)


class FailingError(Exception):
    pass


def _raise(op: PutOp) -> PutOp | None:
    raise FailingError("connection reset by peer")


@pytest.mark.parametrize(
    ("tamper", "content", "cause"),
    [
        (_drop_all, "small\n", "its record is missing"),
        (_drop_all, TWO_MB, "its record is missing"),
        (_drop_chunks, TWO_MB, "chunk 0 is missing"),
        (_flip_chunk, TWO_MB, "chunk 0 does not match its SHA-256"),
        (_shrink_record, "small\n", "its record does not read back as written"),
        (_flip_inline, "small\n", "its record does not read back as written"),
        (_raise, "small\n", "FailingError: connection reset by peer"),
    ],
    ids=[
        "dropped",
        "dropped-chunked",
        "chunks-dropped",
        "chunk-corrupted",
        "record-changed",
        "body-changed",
        "store-error",
    ],
)
def test_a_write_that_does_not_read_back_raises(
    backend: BaseStore,
    thread_id: str,
    tamper: Callable[[PutOp], PutOp | None],
    content: str,
    cause: str,
) -> None:
    artifacts = ArtifactStore(Recording(backend, tamper), thread_id)
    ref = ArtifactStore.ref_for("tool_result", "c1")
    with pytest.raises(ArtifactWriteError) as raised:
        artifacts.put("tool_result", content, source_id="c1")
    message = str(raised.value)
    assert ref in message and cause in message
    honest = ArtifactStore(backend, thread_id)
    if tamper in (_drop_all, _raise):
        assert honest.get(ref) is None
    elif tamper in (_drop_chunks, _flip_chunk):
        with pytest.raises(DamagedArtifactError, match=ref):
            honest.read_text(ref)


async def test_async_write_that_does_not_read_back_raises(thread_id: str) -> None:
    artifacts = ArtifactStore(Recording(InMemoryStore(), _drop_chunks), thread_id)
    with pytest.raises(ArtifactWriteError, match="chunk 0 is missing"):
        await artifacts.aput("tool_result", TWO_MB, source_id="c1")
    artifacts = ArtifactStore(Recording(InMemoryStore(), _raise), thread_id)
    with pytest.raises(ArtifactWriteError, match="connection reset by peer"):
        await artifacts.aput("tool_result", "x", source_id="c1")


# --- paging -----------------------------------------------------------------------------


# Tiny pages (limit 7) only for the texts under 100,000 characters: on the largest ones
# they would take thousands of pages, and the larger limits cover those texts.
PAGING_CASES = [
    (name, limit, max_tokens)
    for name in MIX
    for limit, max_tokens in ((200, 4_000), (1_000, MIN_PAGE_TOKENS), (7, 4_000))
    if not (limit == 7 and len(MIX[name]) > 100_000)
]


@pytest.mark.parametrize(("name", "limit", "max_tokens"), PAGING_CASES)
def test_following_next_offset_rebuilds_the_text_exactly(
    name: str, limit: int, max_tokens: int, thread_id: str
) -> None:
    content = MIX[name]
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    ref = artifacts.put("tool_result", content, source_id=name).ref
    pages = pages_of(artifacts, ref, limit=limit, max_tokens=max_tokens)
    texts = [page.text for page in pages]
    assert reconstruct(texts) == content
    assert rebuild(texts) == content
    expected_offset = 0
    for page in pages:
        assert count_text(page.text) <= max_tokens
        offsets = shown_offsets(page)
        assert offsets == list(range(expected_offset, expected_offset + len(offsets)))
        assert 0 < len(offsets) <= limit or page.total_lines == 0
        expected_offset += len(offsets)
        if page.next_offset is not None:
            assert page.next_offset == expected_offset
            assert f"next offset: {expected_offset}" in page.text.split("\n")[-1]
            assert page.cut == (len(offsets) < limit)
        else:
            assert page.text.split("\n")[-1].startswith("[end of artifact")
    assert expected_offset == pages[0].total_lines


def test_a_one_megabyte_line_is_read_in_marked_windows(backend: BaseStore, thread_id: str) -> None:
    artifacts = ArtifactStore(backend, thread_id)
    ref = artifacts.put("tool_result", ONE_MB_LINE + "\ntail", source_id="line").ref
    first = artifacts.read_page(ref, 0, 3)
    rows = first.text.split("\n")[2:5]
    assert rows[0] == f"0\t{ONE_MB_LINE[:LINE_WINDOW]}"
    assert rows[1] == f"1+\t{ONE_MB_LINE[LINE_WINDOW : 2 * LINE_WINDOW]}"
    assert rows[2].startswith("2+\t")
    assert first.text.split("\n")[-1] == (
        f"[showed offsets 0-2 of {first.total_lines}; next offset: 3; "
        "the line at offset 2 continues at offset 3]"
    )
    assert first.total_lines == 1_000_000 // LINE_WINDOW + 1
    last = artifacts.read_page(ref, first.total_lines - 2)
    assert last.text.split("\n")[2:4] == [
        f"{first.total_lines - 2}+\t{ONE_MB_LINE[-LINE_WINDOW:]}",
        f"{first.total_lines - 1}\ttail",
    ]
    assert rebuild([p.text for p in pages_of(artifacts, ref, limit=1_000)]) == (
        ONE_MB_LINE + "\ntail"
    )


def test_windows_hold_at_most_their_bytes_so_pages_stay_in_budget(thread_id: str) -> None:
    # Rare four-byte characters take several tokens each: the byte cap bounds a window.
    line = "".join(chr(0x20000 + i % 5_000) for i in range(20_000))
    assert all(len(w.encode()) <= WINDOW_BYTES for w in windows(line))
    assert "".join(windows(line)) == line
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    name = "t" + "\U0001f600" * 500  # a long, odd tool name is cut in the header
    ref = artifacts.put("tool_result", line, source_id="rare", tool_name=name).ref
    pages = pages_of(artifacts, ref, limit=1_000, max_tokens=MIN_PAGE_TOKENS)
    assert all(count_text(p.text) <= MIN_PAGE_TOKENS for p in pages)
    assert reconstruct(pages) == line


def test_limit_is_clamped_and_bad_arguments_are_named(thread_id: str) -> None:
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    ref = artifacts.put("tool_result", "".join(f"{i}\n" for i in range(3_000)), source_id="c").ref
    assert shown_offsets(artifacts.read_page(ref, 5, 0)) == [5]
    assert shown_offsets(artifacts.read_page(ref, 5, -3)) == [5]
    assert len(shown_offsets(artifacts.read_page(ref, 0, 50_000, max_tokens=100_000))) == 1_000
    with pytest.raises(ValueError, match="offset must be 0 or more, got -1"):
        artifacts.read_page(ref, -1)
    with pytest.raises(ValueError, match=f"max_tokens must be at least {MIN_PAGE_TOKENS}"):
        artifacts.read_page(ref, 0, max_tokens=100)


def test_an_offset_past_the_end_says_so(thread_id: str) -> None:
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    ref = artifacts.put("tool_result", "a\nb\n", source_id="c", tool_name="ls").ref
    page = artifacts.read_page(ref, 2)
    assert page == Page(
        f"[artifact {ref}: tool_result of ls, 4 bytes, 2 lines (offsets 0-1), "
        "final newline: yes]\n"
        "[offset 2 is past the end: the artifact has 2 lines (offsets 0-1)]",
        next_offset=None,
        total_lines=2,
        cut=False,
    )
    empty = artifacts.put("user_input", "", source_id="m")
    assert artifacts.read_page(empty.ref, 5).text.endswith("has 0 lines (it is empty)]")
    assert artifacts.read_page(empty.ref).text.endswith("[end of artifact: it is empty]")


def test_the_exact_page_format(thread_id: str) -> None:
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    content = "first\n\tsecond\r\n" + "x" * (LINE_WINDOW + 5) + "\nlast"
    ref = artifacts.put("tool_result", content, source_id="c", tool_name="cat").ref
    page = artifacts.read_page(ref, 0, 3)
    assert page.text == "\n".join(
        [
            f"[artifact {ref}: tool_result of cat, {len(content)} bytes, 5 lines "
            "(offsets 0-4), final newline: no]",
            '[format: one "<offset>\\t<text>" row per line; a line longer than 2000 '
            'characters is split, each later part shown as "<offset>+\\t<text>"]',
            "0\tfirst",
            "1\t\tsecond\r",
            f"2\t{'x' * LINE_WINDOW}",
            "[showed offsets 0-2 of 5; next offset: 3; the line at offset 2 continues at offset 3]",
        ]
    )
    assert (page.next_offset, page.total_lines, page.cut) == (3, 5, False)
    rest = artifacts.read_page(ref, 3)
    assert rest.text.split("\n")[2:] == [
        "3+\txxxxx",
        "4\tlast",
        "[end of artifact: showed offsets 3-4 of 5]",
    ]
    assert reconstruct([rest, page]) == content


def test_a_page_cut_by_the_token_budget_says_so(thread_id: str) -> None:
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    content = "".join(f"row {i}: " + "word " * 200 + "\n" for i in range(100))
    ref = artifacts.put("tool_result", content, source_id="c").ref
    page = artifacts.read_page(ref, 0, 100, max_tokens=MIN_PAGE_TOKENS)
    assert page.cut and page.next_offset is not None and page.next_offset < 100
    assert count_text(page.text) <= MIN_PAGE_TOKENS
    assert page.text.split("\n")[-1] == (
        f"[showed offsets 0-{page.next_offset - 1} of 100 (token limit reached); "
        f"next offset: {page.next_offset}]"
    )


def test_reconstruct_refuses_missing_pages() -> None:
    with pytest.raises(ValueError, match="no page header"):
        reconstruct(["0\tx"])
    header = "[artifact art-0: x, 1 bytes, 3 lines (offsets 0-2), final newline: no]"
    with pytest.raises(ValueError, match=r"do not cover offsets 0-2: \[1\]"):
        reconstruct([f"{header}\n0\ta\n2\tc"])


# --- grep -------------------------------------------------------------------------------

LOG = "".join(
    f"{i:03d} {'ERROR disk full' if i in (10, 12, 40, 97) else 'ok'}\n" for i in range(100)
)


def test_grep_shows_numbered_matches_with_merged_context(
    backend: BaseStore, thread_id: str
) -> None:
    artifacts = ArtifactStore(backend, thread_id)
    ref = artifacts.put("tool_result", LOG, source_id="log").ref
    result = artifacts.grep(ref, r"ERROR \w+", context=1)
    assert result == "\n".join(
        [
            f"[grep {ref} for 'ERROR \\\\w+': 4 of 100 lines match; \"<offset>:\" marks a "
            'matching line, "<offset>-" a context line (read offsets)]',
            "9-\t009 ok",
            "10:\t010 ERROR disk full",
            "11-\t011 ok",
            "12:\t012 ERROR disk full",
            "13-\t013 ok",
            "--",
            "39-\t039 ok",
            "40:\t040 ERROR disk full",
            "41-\t041 ok",
            "--",
            "96-\t096 ok",
            "97:\t097 ERROR disk full",
            "98-\t098 ok",
            "[all 4 matching lines shown]",
        ]
    )
    few = artifacts.grep(ref, "ERROR", max_matches=2, context=0)
    assert few.split("\n")[1:] == [
        "10:\t010 ERROR disk full",
        "--",
        "12:\t012 ERROR disk full",
        "[2 more matching lines not shown (max_matches=2); narrow the pattern, raise "
        "max_matches, or read around an offset]",
    ]
    none = artifacts.grep(ref, "WARNING")
    assert none.endswith("0 of 100 lines match]\n[no line matches]")


def test_grep_anchors_work_on_crlf_lines(thread_id: str) -> None:
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    ref = artifacts.put("tool_result", "a ok\r\nb failed\r\nc ok\r\n", source_id="c").ref
    result = artifacts.grep(ref, "ok$", context=0)
    assert result.split("\n")[1:] == [
        "0:\ta ok\r",
        "--",
        "2:\tc ok\r",
        "[all 2 matching lines shown]",
    ]


def test_grep_refuses_an_invalid_pattern_by_name(thread_id: str) -> None:
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    ref = artifacts.put("tool_result", LOG, source_id="log").ref
    with pytest.raises(InvalidPatternError) as raised:
        artifacts.grep(ref, "disk (full")
    assert str(raised.value).startswith("invalid regular expression 'disk (full': missing )")
    assert isinstance(raised.value, ValueError)
    with pytest.raises(InvalidPatternError, match="non-empty"):
        artifacts.grep(ref, "")
    with pytest.raises(InvalidPatternError):  # checked before the ref is looked up
        artifacts.grep("art-0123456789abcdef01234567", "[")


def test_grep_offsets_point_into_long_lines_and_cut_them(thread_id: str) -> None:
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    long_line = "a" * 5_000 + "NEEDLE" + "b" * 5_000
    content = f"head\n{long_line}\ntail\n"
    ref = artifacts.put("tool_result", content, source_id="c").ref
    lines = artifacts.grep(ref, "NEEDLE").split("\n")
    assert lines[1] == "0-\thead"
    assert lines[2] == (
        f"3:\t…{'a' * 100}NEEDLE{'b' * 294}…  [long line cut: characters 4900-5300 of 10006]"
    )
    assert lines[3:] == ["7-\ttail", "[all 1 matching lines shown]"]
    context = artifacts.grep(ref, "tail", context=1).split("\n")
    assert context[1] == f"1-\t{'a' * 400}…  [long line cut: characters 0-400 of 10006]"
    # The reported offset is the window holding the match.
    page = artifacts.read_page(ref, 3, 1)
    assert "NEEDLE" in page.text


def test_grep_stays_within_its_token_budget(thread_id: str) -> None:
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    ref = artifacts.put("tool_result", TWO_MB, source_id="big").ref
    result = artifacts.grep(ref, "fox", max_matches=500, context=20, max_tokens=MIN_PAGE_TOKENS)
    assert count_text(result) <= MIN_PAGE_TOKENS
    footer = result.split("\n")[-1]
    shown = sum(1 for line in result.split("\n") if re.match(r"\d+:\t", line))
    assert footer.startswith(f"[{40_000 - shown} more matching lines not shown (token limit")


# --- listing and eviction ---------------------------------------------------------------


def test_list_is_oldest_first_and_reads_no_content(backend: BaseStore, thread_id: str) -> None:
    artifacts = ArtifactStore(backend, thread_id, clock=Clock())
    made = [
        artifacts.put("tool_result", TWO_MB, source_id="a"),
        artifacts.put("tool_args", '{"x": 1}', source_id="b", tool_name="write"),
        artifacts.put("user_input", "hello", source_id="m-1"),
    ]
    spy = Recording(backend)
    listed = ArtifactStore(spy, thread_id).list()
    assert listed == made
    assert all(isinstance(op, SearchOp) for op in spy.ops)
    assert ArtifactStore(backend, thread_id).usage_bytes() == sum(a.size_bytes for a in made)


def test_evict_drops_the_oldest_unkept_artifacts_until_under_quota(
    backend: BaseStore, thread_id: str
) -> None:
    artifacts = ArtifactStore(backend, thread_id, clock=Clock())
    made = [artifacts.put("tool_result", TWO_MB, source_id="big")]
    made += [artifacts.put("tool_result", "x" * 1_000, source_id=f"c{i}") for i in range(5)]
    total = artifacts.usage_bytes()
    assert total == len(TWO_MB) + 5_000
    keep = {made[0].ref, made[2].ref}
    evicted = artifacts.evict(len(TWO_MB) + 2_500, keep)
    assert evicted == [made[1].ref, made[3].ref, made[4].ref]
    assert artifacts.usage_bytes() <= len(TWO_MB) + 2_500
    assert [a.ref for a in artifacts.list()] == [made[0].ref, made[2].ref, made[5].ref]
    for artifact in made:
        assert (artifacts.get(artifact.ref) is None) == (artifact.ref in evicted)
    # Only kept artifacts left above the quota: eviction stops there.
    assert artifacts.evict(0, {made[0].ref}) == [made[2].ref, made[5].ref]
    assert artifacts.evict(0, {made[0].ref}) == []
    assert artifacts.usage_bytes() == len(TWO_MB)
    # Evicting a chunked artifact deletes its chunks too.
    assert artifacts.evict(0, ()) == [made[0].ref]
    namespace = ("threads", thread_id, "artifacts")
    assert backend.search(namespace, limit=100) == []
    with pytest.raises(ValueError, match="quota_bytes must be 0 or more"):
        artifacts.evict(-1, ())


def test_evict_within_quota_writes_nothing(thread_id: str) -> None:
    spy = Recording(InMemoryStore())
    artifacts = ArtifactStore(spy, thread_id)
    artifacts.put("tool_result", "small", source_id="c")
    spy.ops.clear()
    assert artifacts.evict(10_000, ()) == []
    assert spy.puts() == []


# --- async twins ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
async def test_async_twins_match_the_sync_methods(
    kind: str, database_uri: str, thread_id: str
) -> None:
    sync = ArtifactStore(InMemoryStore(), thread_id, clock=Clock())
    async with async_backend(kind, database_uri) as store:
        spy = Recording(store)
        artifacts = ArtifactStore(spy, thread_id, clock=Clock())
        results: list[Any] = []
        for store_, is_async in [(sync, False), (artifacts, True)]:
            out: list[Any] = []

            async def call(
                name: str, *args: Any, _s: Any = store_, _a: bool = is_async, **kwargs: Any
            ) -> Any:
                if _a:
                    return await getattr(_s, f"a{name}")(*args, **kwargs)
                return getattr(_s, name)(*args, **kwargs)

            big = await call("put", "tool_result", TWO_MB, source_id="big", tool_name="dump")
            small = await call("put", "user_input", CHINESE, source_id="m1")
            out += [big, small]
            out.append(await call("get", big.ref))
            out.append(await call("get", "art-0123456789abcdef01234567"))
            out.append(await call("read_text", small.ref) == CHINESE)
            out.append(await call("read_page", big.ref, 39_990, 5))
            out.append(await call("read_page", small.ref, 0, 1_000))
            out.append(await call("grep", big.ref, r"^0039\d{3}", max_matches=3))
            out.append(await call("list"))
            out.append(await call("usage_bytes"))
            out.append(await call("evict", len(CHINESE.encode()), {small.ref}))
            out.append(await call("list"))
            try:
                await call("read_text", big.ref)
            except UnknownArtifactError as error:
                out.append(str(error))
            results.append(out)
        assert results[0] == results[1]
        # A replayed async put writes nothing.
        again = await artifacts.aput("user_input", CHINESE, source_id="m1")
        assert again == results[1][1]
        spy.ops.clear()
        await artifacts.aput("user_input", CHINESE, source_id="m1")
        assert spy.puts() == []


async def test_async_pages_rebuild_the_text(thread_id: str) -> None:
    artifacts = ArtifactStore(InMemoryStore(), thread_id)
    content = MIX["long then short"] + MIX["crlf"] + MIX["chinese and emoji"]
    ref = (await artifacts.aput("tool_result", content, source_id="c")).ref
    pages: list[Page] = []
    offset: int | None = 0
    while offset is not None:
        page = await artifacts.aread_page(ref, offset, 2)
        pages.append(page)
        offset = page.next_offset
    assert reconstruct(pages) == content
    assert pages == pages_of(artifacts, ref, limit=2)


def test_artifact_records_are_frozen() -> None:
    artifact = Artifact("art-0", "tool_result", None, None, "", 0, 0, 0, "", 1)
    with pytest.raises(AttributeError):
        artifact.ref = "x"  # type: ignore[misc]
    assert replace(artifact, ref="art-1").ref == "art-1"
