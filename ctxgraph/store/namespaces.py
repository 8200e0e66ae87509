"""Builds every Store namespace ctxgraph uses, so their shape lives in one place."""

from __future__ import annotations

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
