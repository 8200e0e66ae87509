"""Decides whether the next request is large enough to compact."""

from __future__ import annotations

from nodes.request import RequestSize
from state.settings import Settings


def fired_triggers(size: RequestSize, settings: Settings, window: int | None) -> list[str]:
    """Names of the triggers that fire for a request of ``size`` (any one is enough)."""
    fired: list[str] = []
    if size.tokens >= settings.trigger_tokens:
        fired.append(f"tokens {size.tokens} >= {settings.trigger_tokens}")
    if size.messages >= settings.trigger_messages:
        fired.append(f"messages {size.messages} >= {settings.trigger_messages}")
    if settings.trigger_fraction is not None and window is not None:
        limit = int(settings.trigger_fraction * window)
        if size.tokens >= limit:
            fired.append(f"tokens {size.tokens} >= {settings.trigger_fraction:g} of {window}")
    return fired
