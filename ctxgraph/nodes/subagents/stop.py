"""Stop flags of running subagents: a timeout, a cancelled parent or Ctrl-C stops a child.

A sync child cannot be interrupted mid-call, so its model node checks its flags before
every model call and stops there; an async child is also cancelled as a task.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

STOPS_KEY = "ctxgraph_subagent_stops"
"""The ``configurable`` key naming a child's flags (its own and its ancestors'), as a
space-separated string of flag ids: config values may be copied or serialized (a
LangGraph server does), so they hold no objects."""


class SubagentStoppedError(Exception):
    """A subagent was told to stop; ``reason`` is ``timeout`` or ``cancelled``."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the subagent was stopped ({reason})")
        self.reason = reason


class StopFlag:
    """One child's flag: set once, with the reason it was set for."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None
        self.id = uuid.uuid4().hex

    def set(self, reason: str) -> None:
        """Ask the child to stop; the first reason given wins."""
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def is_set(self) -> bool:
        """Whether the child was asked to stop."""
        return self._event.is_set()


_running: dict[str, StopFlag] = {}
_lock = threading.Lock()


@contextmanager
def registered() -> Iterator[StopFlag]:
    """A new flag, known to ``stop_all`` (and to ``check_stop`` by its id) while the block runs."""
    flag = StopFlag()
    with _lock:
        _running[flag.id] = flag
    try:
        yield flag
    finally:
        with _lock:
            _running.pop(flag.id, None)


def stop_all(reason: str = "cancelled") -> int:
    """Ask every running subagent of this process to stop; returns how many were running."""
    with _lock:
        flags = list(_running.values())
    for flag in flags:
        flag.set(reason)
    return len(flags)


def running_count() -> int:
    """How many subagents of this process are running."""
    with _lock:
        return len(_running)


def flag_ids(config: Mapping[str, Any] | None) -> str:
    """The ids of the stop flags a run's config names (a child's own and its ancestors')."""
    ids = ((config or {}).get("configurable") or {}).get(STOPS_KEY)
    return ids if isinstance(ids, str) else ""


def with_flag(ids: str, flag: StopFlag) -> str:
    """``ids`` with ``flag``'s id added."""
    return f"{ids} {flag.id}".strip()


def check_stop(config: Mapping[str, Any] | None) -> None:
    """Raise ``SubagentStoppedError`` when any flag named in ``config`` is set."""
    with _lock:
        flags = [_running.get(flag_id) for flag_id in flag_ids(config).split()]
    for flag in flags:
        if flag is not None and flag.is_set():
            raise SubagentStoppedError(flag.reason or "cancelled")
