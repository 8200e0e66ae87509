"""What the memory repository hands to a bundle: its export, and the bulk import of facts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from langgraph.store.base import GetOp, Item

from ctxgraph.state.context import Context
from ctxgraph.state.sans_io import Flow
from ctxgraph.store.memory.facts import Provenance
from ctxgraph.store.memory.reads import MemoryReads
from ctxgraph.store.memory.rules import Category
from ctxgraph.store.memory.writer import MemoryWriter
from ctxgraph.store.memory.writes import utc
from ctxgraph.store.search.vectors import put_facts

__all__ = ["BATCH", "MemoryExchange"]

BATCH = 500
"""Store operations per batch in bulk imports."""


@dataclass(frozen=True)
class MemoryExchange:
    """Exports the memory of a context and imports many facts at once."""

    reads: MemoryReads
    writer: MemoryWriter

    def export(self, context: Context) -> Flow[dict[str, Any]]:
        """Everything remembered for the context (``MemoryRepository.export``)."""
        profile = yield from self.reads.profile(context)
        facts = yield from self.reads.facts(context, "user")
        shared = yield from self.reads.facts(context, "project")
        return {
            "user_id": context.user_id,
            "agent_name": context.agent_name,
            "project_id": context.project_id,
            "profile": profile,
            "facts": [fact.to_dict() for fact in facts],
            "project_facts": [fact.to_dict() for fact in shared],
        }

    def add_facts(
        self,
        context: Context,
        contents: Sequence[str],
        category: Category,
        confidence: float,
        created_at: datetime | None,
        scope: Literal["user", "project"],
        provenance: Provenance,
    ) -> int:
        """Store ``contents`` as facts in batches of ``BATCH`` (``MemoryRepository.add_facts``).

        Raises:
            ValueError: As ``MemoryRepository.add_fact``, before anything is stored.
            ContextError: As ``MemoryRepository.add_fact``.

        """
        moment = utc(created_at)
        writes = [
            self.writer.fact_write(
                context, text, None, category, confidence, moment, scope, provenance=provenance
            )
            for text in contents
        ]
        store = self.writer.store
        for start in range(0, len(writes), BATCH):
            chunk = writes[start : start + BATCH]
            stored = store.batch([GetOp(write.namespace, write.key) for write in chunk])
            put_facts(
                store,
                [
                    write.put_op(old if isinstance(old, Item) else None)
                    for write, old in zip(chunk, stored, strict=True)
                ],
            )
        return len(writes)
