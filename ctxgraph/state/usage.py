"""Tokens each model call of a thread costs, as reported by the provider or counted locally.

Every model call ctxgraph makes on its own (a summary, a memory extraction, a background
job) and every main-model answer is measured as one ``CallUsage``: the provider's reported
``usage_metadata`` when the answer carries it, else the local count of the request and of
the answer. The thread keeps running totals per role in its ``model_usage`` channel
(``add_usage`` is its reducer), which ``ctxgraph threads show T --usage`` prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from typing_extensions import TypedDict

UsageSource = Literal["provider", "local"]

ROLES = ("main", "summary", "memory", "subagent")
"""The roles usage is kept under, in the order ``threads show --usage`` prints them."""


class CallUsage(TypedDict):
    """What one model call cost."""

    role: str
    """Which model made the call: ``main``, ``summary``, ``memory`` or ``subagent``."""
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    """Input tokens the provider served from its prompt cache (0 when not reported)."""
    source: UsageSource
    """``provider`` when the answer reported its usage, ``local`` when counted here."""


class RoleUsage(TypedDict):
    """Running totals of one role's calls in a thread."""

    calls: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    local_calls: int
    """How many of ``calls`` were counted locally because the provider reported nothing."""


UsageTotals = dict[str, RoleUsage]
"""Totals per role; the value of the ``model_usage`` state channel."""


def _tokens(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def reported_usage(reply: Any) -> tuple[int, int, int] | None:
    """``(input, output, cached)`` tokens the provider reported on ``reply``, if it did.

    Reads LangChain's ``usage_metadata`` (``input_tokens``, ``output_tokens`` and
    ``input_token_details.cache_read``); None when the reply carries no usable report.
    """
    usage: Any = getattr(reply, "usage_metadata", None)
    if not isinstance(usage, Mapping):
        return None
    inputs = _tokens(usage.get("input_tokens"))
    outputs = _tokens(usage.get("output_tokens"))
    if inputs is None or outputs is None or inputs == 0:
        return None
    details = usage.get("input_token_details")
    cached = _tokens(details.get("cache_read")) if isinstance(details, Mapping) else None
    return inputs, outputs, cached or 0


def call_usage(
    role: str,
    reply: Any,
    *,
    local_input: Callable[[], int],
    local_output: Callable[[], int],
) -> CallUsage:
    """The usage of one call: the provider's report on ``reply``, else the local counts.

    ``local_input`` and ``local_output`` are called only when the provider reported
    nothing, so a caller pays for local counting only then.
    """
    reported = reported_usage(reply)
    if reported is not None:
        inputs, outputs, cached = reported
        return {
            "role": role,
            "input_tokens": inputs,
            "output_tokens": outputs,
            "cached_tokens": cached,
            "source": "provider",
        }
    return {
        "role": role,
        "input_tokens": max(0, int(local_input())),
        "output_tokens": max(0, int(local_output())),
        "cached_tokens": 0,
        "source": "local",
    }


def usage_update(*calls: CallUsage) -> UsageTotals:
    """The ``model_usage`` update that adds ``calls`` to a thread's totals."""
    totals: UsageTotals = {}
    for call in calls:
        one = _one(call)
        base = totals.get(call["role"])
        totals[call["role"]] = one if base is None else _sum(base, one)
    return totals


def _one(call: CallUsage) -> RoleUsage:
    return {
        "calls": 1,
        "input_tokens": call["input_tokens"],
        "output_tokens": call["output_tokens"],
        "cached_tokens": call["cached_tokens"],
        "local_calls": 1 if call["source"] == "local" else 0,
    }


def _field(value: Mapping[str, Any], name: str) -> int:
    return _tokens(value.get(name)) or 0


def _totals(value: Mapping[str, Any]) -> RoleUsage:
    return {
        "calls": _field(value, "calls"),
        "input_tokens": _field(value, "input_tokens"),
        "output_tokens": _field(value, "output_tokens"),
        "cached_tokens": _field(value, "cached_tokens"),
        "local_calls": _field(value, "local_calls"),
    }


def _sum(first: RoleUsage, second: RoleUsage) -> RoleUsage:
    return {
        "calls": first["calls"] + second["calls"],
        "input_tokens": first["input_tokens"] + second["input_tokens"],
        "output_tokens": first["output_tokens"] + second["output_tokens"],
        "cached_tokens": first["cached_tokens"] + second["cached_tokens"],
        "local_calls": first["local_calls"] + second["local_calls"],
    }


def add_usage(current: UsageTotals | None, update: UsageTotals | None) -> UsageTotals:
    """Reducer of ``model_usage``: the totals of each role add up; None leaves them as is."""
    merged: UsageTotals = {role: _totals(totals) for role, totals in (current or {}).items()}
    for role, totals in (update or {}).items():
        added = _totals(totals)
        base = merged.get(role)
        merged[role] = added if base is None else _sum(base, added)
    return merged


def calls_event_fields(calls: Sequence[CallUsage]) -> dict[str, Any]:
    """The fields several calls' usage adds to one event: their sums and their count.

    ``usage_source`` is ``provider`` or ``local`` when every call agrees, else ``mixed``;
    ``model_calls`` counts the calls and ``local_calls`` those counted locally.
    """
    sources = {call["source"] for call in calls}
    return {
        "model_calls": len(calls),
        "local_calls": sum(1 for call in calls if call["source"] == "local"),
        "input_tokens": sum(call["input_tokens"] for call in calls),
        "output_tokens": sum(call["output_tokens"] for call in calls),
        "cached_tokens": sum(call["cached_tokens"] for call in calls),
        "usage_source": sources.pop() if len(sources) == 1 else ("mixed" if sources else None),
    }


def stored_calls(value: object) -> tuple[CallUsage, ...]:
    """Calls read back from a stored JSON list; entries that are not a call are left out."""
    if not isinstance(value, list | tuple):
        return ()
    calls: list[CallUsage] = []
    for entry in value:
        call = _stored_call(entry)
        if call is not None:
            calls.append(call)
    return tuple(calls)


def _stored_call(entry: object) -> CallUsage | None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("role"), str):
        return None
    source = entry.get("source")
    if source not in ("provider", "local"):
        return None
    counts = [_tokens(entry.get(name)) for name in ("input_tokens", "output_tokens")]
    if counts[0] is None or counts[1] is None:
        return None
    return {
        "role": entry["role"],
        "input_tokens": counts[0],
        "output_tokens": counts[1],
        "cached_tokens": _tokens(entry.get("cached_tokens")) or 0,
        "source": "provider" if source == "provider" else "local",
    }
