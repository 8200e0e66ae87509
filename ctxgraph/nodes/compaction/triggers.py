"""Decides whether the next request is large enough to compact, or to offload old arguments."""

from __future__ import annotations

from ctxgraph.nodes.request_size import RequestSize
from ctxgraph.state.settings import Settings


def fired_triggers(
    size: RequestSize, settings: Settings, window: int | None, *, scale: float = 1.0
) -> list[str]:
    """Names of the triggers that fire for a request of ``size`` (any one is enough).

    ``scale`` lowers every threshold, to ask whether a request leaves room below them.
    """
    fired: list[str] = []
    tokens = int(settings.trigger_tokens * scale)
    if size.tokens >= tokens:
        fired.append(f"tokens {size.tokens} >= {tokens}")
    messages = int(settings.trigger_messages * scale)
    if size.messages >= messages:
        fired.append(f"messages {size.messages} >= {messages}")
    if settings.trigger_fraction is not None and window is not None:
        limit = int(settings.trigger_fraction * scale * window)
        if size.tokens >= limit:
            fired.append(
                f"tokens {size.tokens} >= {limit} ({settings.trigger_fraction:g} of {window})"
            )
    return fired


def args_offload_due(size: RequestSize, settings: Settings, window: int | None) -> bool:
    """Whether old tool arguments are due for offloading before the next request.

    They are once the request reaches ``offload_args_fraction`` of ``trigger_tokens`` or
    of the main model's input ``window`` (when known).
    """
    fraction = settings.offload_args_fraction
    if size.tokens >= int(fraction * settings.trigger_tokens):
        return True
    return window is not None and size.tokens >= int(fraction * window)
