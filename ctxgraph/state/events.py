"""Events of ctxgraph's own work: one log line and, inside a run, one custom stream event."""

from __future__ import annotations

import logging
from typing import Any

from langgraph.config import get_stream_writer


def emit_event(
    logger: logging.Logger,
    name: str,
    thread_id: str,
    fields: dict[str, Any],
    *,
    level: int = logging.INFO,
) -> dict[str, Any]:
    """Log event ``name`` with its fields and stream it when inside a run.

    The stream event is ``{"event": name, "thread_id": ..., **fields}`` under
    ``stream_mode="custom"``; outside a run (a background job's thread, the deferred
    memory worker) it is only logged. Returns the event.
    """
    payload: dict[str, Any] = {"event": name, "thread_id": thread_id, **fields}
    details = " ".join(f"{key}={value}" for key, value in fields.items() if value is not None)
    logger.log(level, "%s thread=%s %s", name, thread_id, details)
    try:
        writer = get_stream_writer()
    except RuntimeError:  # not inside a run
        return payload
    writer(payload)
    return payload
