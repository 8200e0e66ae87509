"""Memory events: a log line and, inside a run, a custom stream event per extraction.

``memory.extracted`` follows each call of the memory model, with its usage (tokens in,
out, cached and their source) and how many facts and profile sections it wrote;
``memory.skipped`` follows a turn whose rows the gate kept from the model, with the
reason. Both are logged on ``ctxgraph.memory``.
"""

from __future__ import annotations

import logging
from typing import Any

from ctxgraph.state.events import emit_event

logger = logging.getLogger("ctxgraph.memory")

EVENT_PREFIX = "memory."
"""Every event name starts with it: ``memory.extracted``, ``memory.skipped``."""


def emit(event: str, thread_id: str, **fields: Any) -> dict[str, Any]:
    """Log ``memory.<event>`` with its fields and stream it when inside a run.

    The stream event is ``{"event": "memory.<event>", "thread_id": ..., **fields}`` under
    ``stream_mode="custom"``; outside a run (the deferred worker) it is only logged.
    Returns the event.
    """
    return emit_event(logger, EVENT_PREFIX + event, thread_id, fields)
