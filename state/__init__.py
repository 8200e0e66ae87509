"""State, runtime context, settings and model roles of a ctxgraph graph."""

from state.context import Context, ContextError
from state.graph_state import AgentState, InputState, OutputState
from state.messages import MalformedMessagesError
from state.models import ModelConfigError, Models
from state.settings import Settings, SettingsError

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
