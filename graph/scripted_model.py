"""The scripted chat model (defined in ``ctxgraph.state.scripted_model``), under its old path."""

from ctxgraph.state.scripted_model import (
    Responder,
    ScriptedChatModel,
    ScriptExhaustedError,
    ScriptItem,
)

__all__ = ["Responder", "ScriptExhaustedError", "ScriptItem", "ScriptedChatModel"]
