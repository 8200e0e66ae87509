"""Which settings apply to a run: the context's override, else the graph's."""

from __future__ import annotations

from ctxgraph.state.context import Context
from ctxgraph.state.settings import Settings


def effective_settings(context: Context, default: Settings) -> Settings:
    """The run's settings: the context's override if it carries one, else the graph's."""
    return context.settings if context.settings is not None else default
