"""Who a ``create_agent`` run is for: ctxgraph's ``Context`` from the runtime or the config.

A graph built by ctxgraph takes ``context=Context(user_id=...)``. An agent built with
``create_agent`` has its own ``context_schema`` (often none), so the middleware reads the
identity where a LangChain user is likely to have put it: a ``Context`` as the run's
context, a context object or mapping with a ``user_id`` (and optionally ``agent_name`` and
``project_id``), or ``user_id`` in the config's ``configurable``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.prebuilt.tool_node import ToolCallRequest, ToolRuntime
from langgraph.runtime import Runtime

from ctxgraph.state.context import Context, ContextError, check_auth_user

FIELDS = ("user_id", "agent_name", "project_id")
"""The identity fields read from a context object or mapping, or from ``configurable``."""

MISSING = (
    "ctxgraph's middleware needs the user's id: run the agent with "
    "context=Context(user_id=...) (create_agent(..., context_schema=Context)), with a "
    "context that has a user_id, or with config={'configurable': {'user_id': ...}}"
)


def _fields(source: object) -> dict[str, Any]:
    """The identity fields ``source`` (a mapping or an object) carries."""
    if isinstance(source, Mapping):
        return {name: source[name] for name in FIELDS if source.get(name) is not None}
    found = {name: getattr(source, name, None) for name in FIELDS}
    return {name: value for name, value in found.items() if value is not None}


def run_context(context: object, config: RunnableConfig | None) -> Context:
    """The ``Context`` of a run whose runtime context is ``context``.

    Raises:
        ContextError: Neither the context nor ``configurable`` names a user, or the
            identity is invalid, or it is not the run's authenticated user.

    """
    if isinstance(context, Context):
        return check_auth_user(context, config)
    fields = _fields(context) if context is not None else {}
    if "user_id" not in fields:
        configurable = (config or {}).get("configurable") or {}
        fields = {**_fields(configurable), **fields}
    if not fields.get("user_id"):
        raise ContextError(f"{MISSING} (got context={context!r})")
    return check_auth_user(Context(**fields), config)


def ctx_runtime(runtime: Runtime[Any], config: RunnableConfig | None) -> Runtime[Context]:
    """``runtime`` with its context replaced by the run's ``Context``."""
    context = run_context(runtime.context, config)
    if context is runtime.context:
        return runtime
    return runtime.override(context=context)


def ctx_tool_request(request: ToolCallRequest) -> ToolCallRequest:
    """``request`` with the run's ``Context`` as its tool runtime's context."""
    runtime = request.runtime
    return with_context(request, run_context(runtime.context, runtime.config))


def with_context(request: ToolCallRequest, context: object) -> ToolCallRequest:
    """``request`` with ``context`` as its tool runtime's context."""
    runtime: ToolRuntime[Any, Any] = request.runtime
    if runtime.context is context:
        return request
    return replace(request, runtime=replace(runtime, context=context))
