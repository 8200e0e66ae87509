"""State, runtime context, settings and model roles of a ctxgraph graph.

The names load on first use, so a module of this package (``ctxgraph.state.context``)
can be imported without the graph state and LangGraph's graph stack.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ctxgraph.state.context import Context, ContextError
    from ctxgraph.state.graph_state import AgentState, InputState, OutputState
    from ctxgraph.state.messages import MalformedMessagesError
    from ctxgraph.state.models import ModelConfigError, Models
    from ctxgraph.state.settings import Settings, SettingsError

_MODULES = {
    "AgentState": "ctxgraph.state.graph_state",
    "Context": "ctxgraph.state.context",
    "ContextError": "ctxgraph.state.context",
    "InputState": "ctxgraph.state.graph_state",
    "MalformedMessagesError": "ctxgraph.state.messages",
    "ModelConfigError": "ctxgraph.state.models",
    "Models": "ctxgraph.state.models",
    "OutputState": "ctxgraph.state.graph_state",
    "Settings": "ctxgraph.state.settings",
    "SettingsError": "ctxgraph.state.settings",
}
"""The module each lazily loaded name lives in."""

__all__ = [
    "AgentState",
    "Context",
    "ContextError",
    "InputState",
    "MalformedMessagesError",
    "ModelConfigError",
    "Models",
    "OutputState",
    "Settings",
    "SettingsError",
]


def __getattr__(name: str) -> "Any":
    """Import a public name the first time it is asked for."""
    if name not in _MODULES:
        raise AttributeError(f"module 'ctxgraph.state' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(_MODULES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
