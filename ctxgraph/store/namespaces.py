"""Builds every Store namespace ctxgraph uses, so their shape lives in one place."""

from __future__ import annotations

import hashlib

from ctxgraph.state.context import validate_label, validate_thread_id


def _thread_label(thread_id: str) -> str:
    """Return ``thread_id`` if it follows the thread id rule, else raise ``ContextError``."""
    return validate_thread_id(thread_id, "thread_id")


def thread_archive(thread_id: str) -> tuple[str, ...]:
    """Namespace of the archived (folded) messages of one thread."""
    return ("threads", _thread_label(thread_id), "archive")


def thread_artifacts(thread_id: str) -> tuple[str, ...]:
    """Namespace of the artifacts of one thread."""
    return ("threads", _thread_label(thread_id), "artifacts")


def thread_compaction_jobs(thread_id: str) -> tuple[str, ...]:
    """Namespace of a thread's finished background compaction jobs, one item per job."""
    return ("threads", _thread_label(thread_id), "compaction_jobs")


def thread_meta(thread_id: str) -> tuple[str, ...]:
    """Namespace of a thread's own records: its owner (key ``owner``)."""
    return ("threads", _thread_label(thread_id), "meta")


def thread_redactions(thread_id: str) -> tuple[str, ...]:
    """Namespace of the anchors of a thread's archive redactions, keyed by receipt id."""
    return ("threads", _thread_label(thread_id), "redactions")


def user_profile(user_id: str) -> tuple[str, ...]:
    """Namespace of a user's profile (one item, key ``profile``), shared by all agents."""
    return ("memory", validate_label("user_id", user_id), "profile")


def user_facts(user_id: str, agent_name: str) -> tuple[str, ...]:
    """Namespace of the facts one agent keeps about one user."""
    return (
        "memory",
        validate_label("user_id", user_id),
        "agents",
        validate_label("agent_name", agent_name),
        "facts",
    )


def project_facts(project_id: str) -> tuple[str, ...]:
    """Namespace of the facts shared by everyone working in one project."""
    return ("memory", "projects", validate_label("project_id", project_id), "facts")


def thread_memory(thread_id: str) -> tuple[str, ...]:
    """Namespace of a thread's memory bookkeeping (processed message ids, deferred queue)."""
    return ("threads", _thread_label(thread_id), "memory")


def memory_queue() -> tuple[str, ...]:
    """Namespace of deferred memory extractions waiting for a worker (one item per thread)."""
    return ("memory_queue",)


def forget_receipts(user_id: str) -> tuple[str, ...]:
    """Namespace of the receipts of one user's forgets, keyed by the hash of the user id.

    The hash keeps the user id itself out of the receipt rows, so deleting the user can
    keep its own receipt without keeping a row that names the user.
    """
    validate_label("user_id", user_id)
    return ("receipts", "forget", _digest(user_id))


def deletion_receipts() -> tuple[str, ...]:
    """Namespace of the receipts of deleted users (each names the user by hash only)."""
    return ("receipts", "deletions")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
