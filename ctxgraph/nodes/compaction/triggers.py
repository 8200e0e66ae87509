"""Decides whether the next request is large enough to compact, or to offload old arguments."""

from __future__ import annotations

from typing import Literal

from ctxgraph.nodes.request_size import RequestSize
from ctxgraph.state.settings import Settings

TriggerKind = Literal["tokens", "messages"]
"""What a trigger counts: the request's tokens (``trigger_tokens``, ``trigger_fraction``)
or its messages (``trigger_messages``)."""


def fired_triggers(
    size: RequestSize,
    settings: Settings,
    window: int | None,
    *,
    scale: float = 1.0,
    messages_scale: float | None = None,
) -> list[str]:
    """Names of the triggers that fire for a request of ``size`` (any one is enough).

    ``scale`` lowers every threshold, to ask whether a request leaves room below them;
    ``messages_scale``, when given, lowers the message trigger instead.
    """
    return [name for _, name in _fired(size, settings, window, scale, messages_scale)]


def pressing_kinds(size: RequestSize, settings: Settings, window: int | None) -> set[TriggerKind]:
    """What a compaction of a request of ``size`` must bring down: tokens, messages or both.

    The kinds of the triggers that fire; below every trigger in background mode, those
    that fire at ``background_fraction`` (where a job starts). When none fires, tokens:
    a compaction nothing asked for must at least make the request smaller.
    """
    fired = _fired(size, settings, window, 1.0)
    if not fired and settings.compaction_mode == "background":
        fired = _fired(size, settings, window, settings.background_fraction)
    return {kind for kind, _ in fired} or {"tokens"}


def _fired(
    size: RequestSize,
    settings: Settings,
    window: int | None,
    scale: float,
    messages_scale: float | None = None,
) -> list[tuple[TriggerKind, str]]:
    """The kind and name of each trigger that fires at ``scale``."""
    fired: list[tuple[TriggerKind, str]] = []
    tokens = int(settings.trigger_tokens * scale)
    if size.tokens >= tokens:
        fired.append(("tokens", f"tokens {size.tokens} >= {tokens}"))
    messages = int(
        settings.trigger_messages * (scale if messages_scale is None else messages_scale)
    )
    if size.messages >= messages:
        fired.append(("messages", f"messages {size.messages} >= {messages}"))
    if settings.trigger_fraction is not None and window is not None:
        limit = int(settings.trigger_fraction * scale * window)
        if size.tokens >= limit:
            fired.append(
                (
                    "tokens",
                    f"tokens {size.tokens} >= {limit} ({settings.trigger_fraction:g} of {window})",
                )
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
