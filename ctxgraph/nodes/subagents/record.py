"""Updates of the delegation record made by the model node: started and abandoned tasks."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from langchain_core.messages import AIMessage

from ctxgraph.nodes.subagents.render import brief
from ctxgraph.nodes.subagents.tool import TASK_TOOL
from ctxgraph.state.delegations import DelegationEntry, delegation_entries, merge_delegations

S = TypeVar("S", bound=Mapping[str, Any])


def utc_now() -> str:
    """The current time, ISO 8601 in UTC."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def started(reply: AIMessage) -> list[DelegationEntry]:
    """A ``running`` entry for each ``task`` call of the model's answer."""
    entries: list[DelegationEntry] = []
    now = utc_now()
    for call in reply.tool_calls:
        if call["name"] != TASK_TOOL or not call.get("id"):
            continue
        args = call["args"] if isinstance(call["args"], Mapping) else {}
        description = args.get("description")
        kind = args.get("subagent_type")
        entries.append(
            {
                "id": str(call["id"]),
                "type": kind if isinstance(kind, str) and kind else "?",
                "brief": brief(description if isinstance(description, str) else ""),
                "status": "running",
                "started_at": now,
            }
        )
    return entries


def abandoned(state: Mapping[str, Any]) -> list[DelegationEntry]:
    """Entries still ``running`` when the model is called again, marked ``cancelled``.

    A task runs before the next model call of its run, so a running entry seen here
    belongs to a run that was cancelled or crashed before its child finished.
    """
    return [
        {**entry, "status": "cancelled", "stop_reason": "cancelled"}
        for entry in delegation_entries(state)
        if entry["status"] == "running"
    ]


def with_abandoned(state: S) -> tuple[S, list[DelegationEntry]]:
    """``state`` with its abandoned delegations marked ``cancelled``, and those entries.

    The model node builds its request from the returned state, so the model sees the
    statuses it writes.
    """
    entries = abandoned(state)
    if not entries:
        return state, []
    marked = merge_delegations(state.get("delegations"), entries)
    return cast(S, {**state, "delegations": marked}), entries


def model_update(reply: AIMessage, marked: list[DelegationEntry]) -> dict[str, Any]:
    """The ``delegations`` part of the model node's update (empty when nothing changed).

    ``marked`` are the entries ``with_abandoned`` marked cancelled before the call.
    """
    entries = [*marked, *started(reply)]
    return {"delegations": entries} if entries else {}
