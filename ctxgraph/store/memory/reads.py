"""What the memory repository reads: the facts of a scope, the profile and the problems.

Each method returns a flow (``state.sans_io``); ``MemoryRepository`` runs it with ``run``
for its sync method and ``arun`` for the async twin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import BaseStore, GetOp, Item

from ctxgraph.state.context import Context
from ctxgraph.state.sans_io import Flow, io
from ctxgraph.store.memory.facts import Fact, FactScope, Problem, fact_from_value
from ctxgraph.store.memory.scopes import fact_namespace, search_scopes
from ctxgraph.store.memory.writes import PROFILE_KEY, profile_problem, profile_sections
from ctxgraph.store.namespaces import user_profile
from ctxgraph.store.search.index import fact_index_cache

__all__ = ["MemoryReads", "sorted_facts"]


def sorted_facts(rows: list[tuple[str, Mapping[str, Any]]], scope: FactScope) -> list[Fact]:
    """The facts of stored ``(key, value)`` rows of ``scope``, oldest first."""
    facts = [fact_from_value(key, value, scope) for key, value in rows]
    return sorted(facts, key=lambda fact: (fact.created_at, fact.id))


@dataclass(frozen=True)
class MemoryReads:
    """The reads of long-term memory in ``store``, as plans."""

    store: BaseStore

    def facts(self, context: Context, *scopes: FactScope) -> Flow[list[Fact]]:
        """The facts of each of ``scopes`` in turn, each oldest first.

        A ``"project"`` scope of a context without a project has no facts.
        """
        found: list[Fact] = []
        for scope in scopes:
            if scope == "project" and context.project_id is None:
                continue
            namespace = fact_namespace(context, scope)
            rows = yield from io(
                fact_index_cache.values, fact_index_cache.avalues, self.store, namespace
            )
            found += sorted_facts(rows, scope)
        return found

    def profile(self, context: Context) -> Flow[dict[str, str]]:
        """The user's profile, every section by name (``MemoryRepository.get_profile``)."""
        namespace = user_profile(context.user_id)
        item = yield from io(self.store.get, self.store.aget, namespace, PROFILE_KEY)
        return profile_sections(item)

    def problems(self, context: Context) -> Flow[list[Problem]]:
        """The malformed facts, then a malformed profile (``MemoryRepository.problems``)."""
        found: list[Problem] = []
        for namespace, _ in search_scopes(context):
            keyed = yield from io(
                fact_index_cache.problems, fact_index_cache.aproblems, self.store, namespace
            )
            found += [Problem(namespace, key, problem) for key, problem in keyed]
        namespace = user_profile(context.user_id)
        profile = profile_problem(
            (yield from io(self.store.get, self.store.aget, namespace, PROFILE_KEY))
        )
        return found if profile is None else [*found, profile]

    def profile_op(self, context: Context) -> GetOp:
        """The Store read of the user's profile, to batch with other reads."""
        config = self.store.ttl_config
        refresh = config.get("refresh_on_read", True) if config is not None else True
        return GetOp(user_profile(context.user_id), PROFILE_KEY, refresh)

    @staticmethod
    def profile_of(item: Item | None) -> dict[str, str]:
        """The profile in what :meth:`profile_op` read."""
        return profile_sections(item)
