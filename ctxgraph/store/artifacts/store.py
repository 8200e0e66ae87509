"""``ArtifactStore``: one thread's artifacts in the Store, written once and read back in pages."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import Required, TypedDict, Unpack

from langgraph.store.base import BaseStore

from ctxgraph.store.artifacts.flows import (
    Flow,
    arun,
    fill_page,
    list_metas,
    load_meta,
    load_text,
    run,
)
from ctxgraph.store.artifacts.grep import compile_pattern, grep_text
from ctxgraph.store.artifacts.layout import utf8
from ctxgraph.store.artifacts.paging import (
    MAX_LIMIT,
    MIN_PAGE_TOKENS,
    Page,
    PageBuilder,
    header,
    past_end,
)
from ctxgraph.store.artifacts.records import (
    KINDS,
    Artifact,
    ArtifactKind,
    ArtifactWriteError,
    UnknownArtifactError,
    checked_ref,
    ref_for,
)
from ctxgraph.store.artifacts.writes import Draft, evict_flow, put_flow, remove_flow
from ctxgraph.store.namespaces import thread_artifacts

Artifacts = list[Artifact]
"""A listing of artifacts, oldest first."""

Refs = list[str]


class ArtifactSource(TypedDict, total=False):
    """Where an artifact comes from, as ``ArtifactStore.put`` and ``aput`` take it."""

    source_id: Required[str]
    """The id of the message or tool call it comes from (part of its ref)."""
    tool_name: str | None
    """The tool whose result or arguments it holds, if any."""
    part: str
    """Tells several artifacts of one source apart (part of its ref; default "")."""
    tokens: int | None
    """Its token count, when the caller already knows it (None: counted)."""


class GrepLimits(TypedDict, total=False):
    """How much ``ArtifactStore.grep`` and ``agrep`` return."""

    max_matches: int
    """Matching lines shown at most, 1..500 (default 50)."""
    context: int
    """Lines shown around each match (default 2)."""
    max_tokens: int
    """Tokens of the answer at most (default 4,000)."""


def _checked_budget(max_tokens: int) -> int:
    if max_tokens < MIN_PAGE_TOKENS:
        raise ValueError(f"max_tokens must be at least {MIN_PAGE_TOKENS}, got {max_tokens}")
    return max_tokens


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ArtifactStore:
    """The artifacts of one thread, in namespace ``("threads", thread_id, "artifacts")``.

    Every write uses ``index=False``: artifacts are never embedded. Sync and async methods
    run the same flows (``flows``), so they behave alike.
    """

    ref_for = staticmethod(ref_for)

    def __init__(
        self, store: BaseStore, thread_id: str, *, clock: Callable[[], datetime] = _utc_now
    ) -> None:
        self.store = store
        self.thread_id = thread_id
        self.namespace = thread_artifacts(thread_id)
        self._clock = clock

    # --- writing --------------------------------------------------------------------

    def _draft(
        self,
        kind: ArtifactKind,
        content: str,
        source_id: str,
        tool_name: str | None,
        part: str,
    ) -> Draft:
        if kind not in KINDS:
            raise ValueError(f"artifact kind must be one of {sorted(KINDS)}, got {kind!r}")
        if not isinstance(content, str):
            raise TypeError(f"artifact content must be a str, got {type(content).__name__}")
        ref = ref_for(kind, source_id, part)
        data = utf8(content)
        return Draft(
            ref=ref,
            kind=kind,
            content=content,
            size_bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            source_id=source_id,
            tool_name=tool_name,
        )

    def _put(
        self,
        kind: ArtifactKind,
        content: str,
        *,
        source_id: str,
        tool_name: str | None = None,
        part: str = "",
        tokens: int | None = None,
    ) -> tuple[Draft, Flow[Artifact]]:
        """The draft of ``content`` and the flow that writes it."""
        draft = self._draft(kind, content, source_id, tool_name, part)
        created_at = self._clock().astimezone(UTC).isoformat(timespec="microseconds")
        return draft, put_flow(draft, self.namespace, created_at=created_at, tokens=tokens)

    @staticmethod
    def _write_error(draft: Draft, error: Exception) -> ArtifactWriteError:
        if isinstance(error, ArtifactWriteError):
            return error
        return ArtifactWriteError(
            f"could not store artifact {draft.ref}: {type(error).__name__}: {error}"
        )

    def put(self, kind: ArtifactKind, content: str, **source: Unpack[ArtifactSource]) -> Artifact:
        """Store ``content`` under ``ref_for(kind, source_id, part)`` and return its record.

        Idempotent: if the ref already holds this content intact, nothing is written (a
        replayed step); other content under the ref is replaced. The artifact is read back
        before it is returned; any failure raises ``ArtifactWriteError`` naming the ref.
        ``tokens`` skips counting when the caller already knows the count.
        """
        draft, flow = self._put(kind, content, **source)
        try:
            return run(self.store, flow)
        except Exception as error:
            raise self._write_error(draft, error) from error

    async def aput(
        self, kind: ArtifactKind, content: str, **source: Unpack[ArtifactSource]
    ) -> Artifact:
        """Async :meth:`put`."""
        draft, flow = self._put(kind, content, **source)
        try:
            return await arun(self.store, flow)
        except Exception as error:
            raise self._write_error(draft, error) from error

    # --- reading --------------------------------------------------------------------

    def get(self, ref: str) -> Artifact | None:
        """The record of ``ref``, or None if this thread has no such artifact."""
        try:
            return run(self.store, load_meta(self.namespace, checked_ref(ref))).artifact
        except UnknownArtifactError:
            return None

    async def aget(self, ref: str) -> Artifact | None:
        """Async :meth:`get`."""
        try:
            return (await arun(self.store, load_meta(self.namespace, checked_ref(ref)))).artifact
        except UnknownArtifactError:
            return None

    def read_text(self, ref: str) -> str:
        """The whole content of ``ref``; ``UnknownArtifactError`` if there is none."""
        return run(self.store, load_text(self.namespace, checked_ref(ref)))[1]

    async def aread_text(self, ref: str) -> str:
        """Async :meth:`read_text`."""
        return (await arun(self.store, load_text(self.namespace, checked_ref(ref))))[1]

    def _page(self, ref: str, offset: int, limit: int, max_tokens: int) -> Flow[Page]:
        if offset < 0:
            raise ValueError(f"offset must be 0 or more, got {offset}")
        limit = max(1, min(limit, MAX_LIMIT))
        max_tokens = _checked_budget(max_tokens)
        return self._page_flow(checked_ref(ref), offset, limit, max_tokens)

    def _page_flow(self, ref: str, offset: int, limit: int, max_tokens: int) -> Flow[Page]:
        stored = yield from load_meta(self.namespace, ref)
        head = header(stored.artifact, stored.rows, stored.final_newline)
        if offset >= stored.rows and (offset or stored.rows):
            return past_end(head, offset, stored.rows)
        builder = PageBuilder(
            head, offset=offset, limit=limit, total=stored.rows, max_tokens=max_tokens
        )
        yield from fill_page(self.namespace, stored, builder)
        return builder.page()

    def read_page(
        self, ref: str, offset: int = 0, limit: int = 200, *, max_tokens: int = 4_000
    ) -> Page:
        """Display lines ``offset`` .. ``offset + limit - 1`` of ``ref``, within ``max_tokens``.

        ``limit`` is clamped to 1..1000; the page stops early at the token budget and its
        footer (and ``Page.next_offset``) names the exact next offset. An offset past the
        end gives a page saying so. The format is described in ``paging``; ``reconstruct``
        rebuilds the text from pages. ``max_tokens`` must be at least ``MIN_PAGE_TOKENS``.
        """
        return run(self.store, self._page(ref, offset, limit, max_tokens))

    async def aread_page(
        self, ref: str, offset: int = 0, limit: int = 200, *, max_tokens: int = 4_000
    ) -> Page:
        """Async :meth:`read_page`."""
        return await arun(self.store, self._page(ref, offset, limit, max_tokens))

    def _grep(
        self,
        ref: str,
        pattern: str,
        *,
        max_matches: int = 50,
        context: int = 2,
        max_tokens: int = 4_000,
    ) -> Flow[str]:
        compiled = compile_pattern(pattern)
        max_tokens = _checked_budget(max_tokens)
        checked = checked_ref(ref)

        def flow() -> Flow[str]:
            _, text = yield from load_text(self.namespace, checked)
            return grep_text(
                checked,
                pattern,
                text,
                compiled,
                max_matches=max_matches,
                context=context,
                max_tokens=max_tokens,
            )

        return flow()

    def grep(self, ref: str, pattern: str, **limits: Unpack[GrepLimits]) -> str:
        r"""Lines of ``ref`` matching the Python regex ``pattern``, with ``context`` around.

        Matching lines read ``"<offset>:\t<text>"``, context lines ``"<offset>-\t<text>"``
        (offsets as ``read_page`` takes them), at most ``max_matches`` (1..500) matching
        lines and ``max_tokens``; the footer says how many matches were not shown. An
        invalid pattern raises ``InvalidPatternError`` (a ``ValueError``) naming it.
        """
        return run(self.store, self._grep(ref, pattern, **limits))

    async def agrep(self, ref: str, pattern: str, **limits: Unpack[GrepLimits]) -> str:
        """Async :meth:`grep`."""
        return await arun(self.store, self._grep(ref, pattern, **limits))

    # --- listing and eviction -------------------------------------------------------

    def list(self) -> Artifacts:
        """Every artifact's record (metadata only), oldest first."""
        return [stored.artifact for stored in run(self.store, list_metas(self.namespace))]

    async def alist(self) -> Artifacts:
        """Async :meth:`list`."""
        return [stored.artifact for stored in await arun(self.store, list_metas(self.namespace))]

    def usage_bytes(self) -> int:
        """Total content size of the thread's artifacts."""
        return sum(artifact.size_bytes for artifact in self.list())

    async def ausage_bytes(self) -> int:
        """Async :meth:`usage_bytes`."""
        return sum(artifact.size_bytes for artifact in await self.alist())

    def evict(self, quota_bytes: int, keep: Collection[str]) -> Refs:
        """Delete the oldest artifacts not in ``keep`` until the total fits ``quota_bytes``.

        Returns the evicted refs, oldest first. Stops early (over quota) when only kept
        artifacts are left.
        """
        _check_quota(quota_bytes)
        return run(self.store, evict_flow(self.namespace, quota_bytes, frozenset(keep)))

    async def aevict(self, quota_bytes: int, keep: Collection[str]) -> Refs:
        """Async :meth:`evict`."""
        _check_quota(quota_bytes)
        return await arun(self.store, evict_flow(self.namespace, quota_bytes, frozenset(keep)))

    def remove(self, refs: Collection[str], *, created_before: datetime) -> Refs:
        """Delete the artifacts of ``refs`` stored before ``created_before``.

        For artifacts nothing refers to (see ``nodes.offload.orphans``); one stored at or
        after ``created_before`` (just written, or rewritten since) is kept. Returns the
        removed refs, oldest first.
        """
        flow = remove_flow(self.namespace, frozenset(refs), _iso(created_before))
        return run(self.store, flow)

    async def aremove(self, refs: Collection[str], *, created_before: datetime) -> Refs:
        """Async :meth:`remove`."""
        flow = remove_flow(self.namespace, frozenset(refs), _iso(created_before))
        return await arun(self.store, flow)

    def now(self) -> datetime:
        """The time this store dates new artifacts with (its clock), in UTC."""
        return self._clock().astimezone(UTC)


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError(f"created_before must be timezone-aware, got {moment!r}")
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _check_quota(quota_bytes: int) -> None:
    if quota_bytes < 0:
        raise ValueError(f"quota_bytes must be 0 or more, got {quota_bytes}")
