"""Compaction events: a log line and, inside a run, a custom stream event per job step.

The steps of a background job are started, skipped_busy, ready, applied, discarded and
failed; inline compaction emits summarized after its summary calls. Each is logged on
``ctxgraph.compaction``. An event that follows summary calls carries their usage (see
``ctxgraph.state.usage.calls_event_fields``).
"""

from __future__ import annotations

import logging
from typing import Any

from ctxgraph.state.events import emit_event

logger = logging.getLogger("ctxgraph.compaction")

EVENT_PREFIX = "compaction."
"""Every event name starts with it: ``compaction.started``, ``compaction.applied``, …"""

_WARNINGS = frozenset({"discarded", "failed"})


def emit(event: str, thread_id: str, **fields: Any) -> dict[str, Any]:
    """Log ``compaction.<event>`` with its fields and stream it when inside a run.

    The stream event is ``{"event": "compaction.<event>", "thread_id": ..., **fields}``
    under ``stream_mode="custom"``; outside a run (a job's own thread) it is only logged.
    Returns the event.
    """
    level = logging.WARNING if event in _WARNINGS else logging.INFO
    return emit_event(logger, EVENT_PREFIX + event, thread_id, fields, level=level)
