"""Finished background compaction jobs, stored in the Store until a trigger applies them.

A job's result is keyed by the compaction version it started from and its last folded
message id, so storing it twice (a retried write) or applying it twice (a replayed step)
changes nothing. Results whose base is behind the thread's mark are dropped when seen.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore

from ctxgraph.state.messages import content_text
from ctxgraph.state.usage import CallUsage, stored_calls
from ctxgraph.store.namespaces import thread_compaction_jobs
from ctxgraph.store.text_codec import decoded, encoded

RESULTS_LIMIT = 20
"""Stored results read per lookup; a thread rarely has more than one."""


def folded_hash(messages: Sequence[BaseMessage]) -> str:
    """A SHA-256 over what a summary of ``messages`` depends on.

    Each message contributes its id, type, text, the ids and names of its tool calls and
    the call a tool result answers. Tool-call arguments are left out: offloading replaces
    long arguments of old calls with a ref while a job runs, which does not change what
    the summary says.
    """
    digest = hashlib.sha256()
    for message in messages:
        calls = [[call.get("id"), call.get("name")] for call in _calls(message)]
        part = [
            message.id,
            message.type,
            content_text(message),
            calls,
            getattr(message, "tool_call_id", None),
        ]
        digest.update(json.dumps(part, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        digest.update(b"\n")
    return digest.hexdigest()


def _calls(message: BaseMessage) -> list[Mapping[str, Any]]:
    calls = getattr(message, "tool_calls", None)
    return list(calls) if isinstance(calls, list) else []


@dataclass(frozen=True)
class JobResult:
    """A finished job: the summary sections of a snapshot, and what makes it still valid."""

    base_version: int
    """The thread's committed compaction version when the job took its snapshot."""
    folded_ids: tuple[str, ...]
    """The ids of the messages the summary folds, in window order."""
    folded_hash: str
    """``folded_hash`` of those messages at snapshot time."""
    sections: dict[str, str]
    """The checked summary sections."""
    token: int
    """The fencing token of the lease the job held."""
    holder: str
    """Who held that lease (host, process id and a random part)."""
    started_at: str
    stored_at: str
    latency_s: float
    """Seconds the summary took."""
    tokens_before: int
    """Tokens of the request when the job started."""
    calls: tuple[CallUsage, ...] = ()
    """The usage of the job's summary calls; the thread's ``model_usage`` adds it once,
    when the result is applied or discarded (a result stored before usage was kept has
    none)."""
    request: str = "compact"
    """``shared_prefix`` when the summary request showed the kept messages too (then they
    are evidence when the result is checked again), else ``compact``."""

    @property
    def key(self) -> str:
        """The Store key: the base version and the last folded id."""
        return f"v{self.base_version:06d}-{self.folded_ids[-1] if self.folded_ids else ''}"

    def to_value(self) -> dict[str, Any]:
        """The Store item value (its text encoded: ``store.text_codec``)."""
        value = asdict(self)
        value["folded_ids"] = list(self.folded_ids)
        value["calls"] = [dict(call) for call in self.calls]
        return encoded(value)

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> JobResult | None:
        """A stored value read back; None when it is not a job result."""
        value = decoded(value)
        try:
            return cls(
                base_version=int(value["base_version"]),
                folded_ids=tuple(str(i) for i in value["folded_ids"]),
                folded_hash=str(value["folded_hash"]),
                sections={str(k): str(v) for k, v in dict(value["sections"]).items()},
                token=int(value["token"]),
                holder=str(value["holder"]),
                started_at=str(value["started_at"]),
                stored_at=str(value["stored_at"]),
                latency_s=float(value["latency_s"]),
                tokens_before=int(value["tokens_before"]),
                calls=stored_calls(value.get("calls")),
                request=str(value.get("request") or "compact"),
            )
        except (KeyError, TypeError, ValueError):
            return None


class JobResults:
    """The stored job results of one thread (``("threads", id, "compaction_jobs")``)."""

    def __init__(self, store: BaseStore, thread_id: str) -> None:
        self._store = store
        self.thread_id = thread_id
        self._namespace = thread_compaction_jobs(thread_id)

    def put(self, result: JobResult) -> None:
        """Store ``result`` (a second put of the same job overwrites it with itself)."""
        self._store.put(self._namespace, result.key, result.to_value(), index=False)

    async def aput(self, result: JobResult) -> None:
        """Async :meth:`put`."""
        await self._store.aput(self._namespace, result.key, result.to_value(), index=False)

    def results(self) -> list[tuple[str, JobResult | None]]:
        """Stored results by key, newest first; an unreadable item is ``(key, None)``."""
        items = self._store.search(self._namespace, limit=RESULTS_LIMIT)
        return _ordered(items)

    def ready(self, version: int) -> JobResult | None:
        """The newest stored result that starts from compaction ``version``, if any."""
        for _, result in self.results():
            if result is not None and result.base_version == version:
                return result
        return None

    def delete(self, key: str) -> None:
        """Drop one result."""
        self._store.delete(self._namespace, key)

    async def adelete(self, key: str) -> None:
        """Async :meth:`delete`."""
        await self._store.adelete(self._namespace, key)


def _ordered(items: Sequence[Any]) -> list[tuple[str, JobResult | None]]:
    ordered = sorted(items, key=lambda item: (item.updated_at, item.key), reverse=True)
    return [(item.key, JobResult.from_value(item.value)) for item in ordered]
