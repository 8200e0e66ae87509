"""Which settings apply to a run: the graph's, with the fields the run's context sets."""

from __future__ import annotations

from ctxgraph.state.context import Context
from ctxgraph.state.settings import Settings


def effective_settings(context: Context, default: Settings) -> Settings:
    """The run's settings: ``default`` (the graph's) with the context's given fields on top.

    Only the fields the run's ``Context.settings`` explicitly set override the graph's
    build-time values (``Settings.merged_onto``); every other field keeps the graph's value.
    Raises ``SettingsError`` when the combination is invalid.
    """
    override = context.settings
    return default if override is None else override.merged_onto(default)


def settings_for(context: object, default: Settings) -> Settings:
    """:func:`effective_settings`, or ``default`` when there is no ctxgraph ``Context``.

    A tool or tool wrapper run outside a ctxgraph run sees ``None`` as its context.
    """
    return effective_settings(context, default) if isinstance(context, Context) else default
