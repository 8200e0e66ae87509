"""Reads the Markdown tables of a benchmark report printed to standard output."""

from __future__ import annotations


def table_rows(out: str) -> dict[str, list[str]]:
    """Each table row of ``out`` by its first cell: the other cells, stripped."""
    return {
        line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
        for line in out.splitlines()
        if line.startswith("| ")
    }


def number(cell: str) -> int:
    """A table cell as a whole number; thousands separators are allowed."""
    return int(cell.strip().replace(",", ""))
