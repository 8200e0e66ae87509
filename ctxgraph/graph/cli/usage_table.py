"""The model usage table of ``ctxgraph threads show T --usage``: tokens per role, then a total."""

from __future__ import annotations

from collections.abc import Mapping

from ctxgraph.graph.cli.render import escape_control
from ctxgraph.state.usage import ROLES, RoleUsage, UsageTotals, add_usage

COLUMNS = ("calls", "input_tokens", "output_tokens", "cached_tokens", "local_calls")
"""The counted fields, in column order."""

HEADINGS = ("role", "calls", "input tokens", "output tokens", "cached tokens", "counted locally")
"""The table's heading line."""

NO_USAGE = "model usage: none recorded (no model call of this thread has been counted)"
"""What a thread without any counted call prints instead of the table."""


def thread_usage(value: object) -> UsageTotals:
    """A checkpointed ``model_usage`` value as totals (empty when there is none or it is not one).

    Roles whose totals are not a mapping are left out; counts that are not whole numbers
    read as 0.
    """
    if not isinstance(value, Mapping):
        return {}
    roles = {str(role): totals for role, totals in value.items() if isinstance(totals, Mapping)}
    return add_usage(None, roles)  # type: ignore[arg-type]


def ordered_roles(totals: UsageTotals) -> list[str]:
    """The roles of ``totals``: the known ones in ``ROLES`` order, then any other sorted."""
    known = [role for role in ROLES if role in totals]
    return known + sorted(set(totals) - set(ROLES))


def usage_rows(totals: UsageTotals) -> list[tuple[str, ...]]:
    """The table's rows: one per role with calls, then ``total``; empty without any call."""
    totals = thread_usage(totals)
    roles = [role for role in ordered_roles(totals) if totals[role]["calls"]]
    if not roles:
        return []
    rows = [_row(escape_control(role), totals[role]) for role in roles]
    total: RoleUsage = {
        "calls": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cached_tokens": 0,
        "local_calls": 0,
    }
    for role in roles:
        total = add_usage({"total": total}, {"total": totals[role]})["total"]
    rows.append(_row("total", total))
    return rows


def _row(role: str, usage: RoleUsage) -> tuple[str, ...]:
    return (role, *(str(usage[column]) for column in COLUMNS))  # type: ignore[literal-required]


def usage_lines(totals: UsageTotals) -> list[str]:
    """``model usage:`` and the aligned table (role left, counts right), or ``NO_USAGE``.

    ``counted locally`` is how many of the calls were counted with the local token
    counter because the provider reported no usage.
    """
    rows = usage_rows(totals)
    if not rows:
        return [NO_USAGE]
    table = [HEADINGS, *rows]
    widths = [max(len(row[index]) for row in table) for index in range(len(HEADINGS))]
    lines = ["model usage:"]
    for row in table:
        cells = [row[0].ljust(widths[0])]
        cells.extend(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))
        lines.append("  ".join(cells).rstrip())
    return lines
