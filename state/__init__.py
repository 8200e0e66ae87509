"""State, runtime context, settings and model roles of a ctxgraph graph."""

from ctxgraph.state.context import Context, ContextError
from ctxgraph.state.graph_state import AgentState, InputState, OutputState
from ctxgraph.state.messages import MalformedMessagesError
from ctxgraph.state.models import ModelConfigError, Models
from ctxgraph.state.settings import Settings, SettingsError

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
