"""Builds every Store namespace ctxgraph uses, so their shape lives in one place."""

from __future__ import annotations


def _thread_label(thread_id: object) -> str:
    """Return ``thread_id`` if it can be a namespace label, else raise ValueError naming it."""
    if not isinstance(thread_id, str) or not thread_id:
        raise ValueError(f"a thread id must be a non-empty string, got {thread_id!r}")
    if "." in thread_id:
        raise ValueError(f"a thread id may not contain a period ('.'), got {thread_id!r}")
    return thread_id


def thread_archive(thread_id: str) -> tuple[str, ...]:
    """Namespace of the archived (folded) messages of one thread."""
    return ("threads", _thread_label(thread_id), "archive")


def thread_artifacts(thread_id: str) -> tuple[str, ...]:
    """Namespace of the artifacts of one thread."""
    return ("threads", _thread_label(thread_id), "artifacts")
