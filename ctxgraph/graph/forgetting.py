"""A one-node graph that forgets a fact or a text on a LangGraph server (``forget``).

Run it as a stateless run (the auth rules refuse it on a thread)::

    client.runs.wait(None, "forget", input={"text": "555-0142"})
    client.runs.wait(None, "forget", input={"fact": "phone", "dry_run": True})
    ops.runs.wait(None, "forget", input={"user_id": "alice", "text": "555-0142"})

The user is the run's ``Context.user_id``, which the auth binds to the caller; an
operator names another user with the input's ``user_id``. The run searches the user's
memory and every thread the user owns (or only ``thread_id``), reaching the threads
through the server's SDK (``ServerThreadStates``), and returns ``{"receipt": {...}}``
(the receipt is stored unless ``dry_run``). An invalid request fails the run with the
error's message: ``ForgetError`` (no fact, neither or both of fact and text),
``ContextError`` (a bad id, a thread of another user), ``RedactionError`` (a text too
short), ``PendingWritesError`` (a thread with a run in progress or interrupted).
"""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from ctxgraph.graph.auth import FORGET_GRAPH
from ctxgraph.graph.server_states import ServerThreadStates
from ctxgraph.state.context import Context, ContextError
from ctxgraph.store.forget import ForgetError, aforget

__all__ = [
    "FORGET_GRAPH",
    "ForgetInput",
    "ForgetOutput",
    "ForgetStoreError",
    "build_forget_graph",
]


class ForgetStoreError(RuntimeError):
    """The graph ran without a Store, so there is nothing to forget in."""


class ForgetInput(TypedDict, total=False):
    """What to forget: exactly one of ``fact`` (a fact key) and ``text``."""

    fact: str
    text: str
    thread_id: str
    """Only this thread (it must be the user's) besides the memory."""
    dry_run: bool
    """List the places, change nothing, store no receipt."""
    user_id: str
    """Whose data; only an operator may name someone other than the run's user."""


class ForgetOutput(TypedDict, total=False):
    """The receipt, as ``Receipt.as_dict()``."""

    receipt: dict[str, object]


class ForgetState(ForgetInput, ForgetOutput, total=False):
    """Input and output of the forget graph in one state."""


ForgetGraph = CompiledStateGraph[ForgetState, Context, ForgetInput, ForgetOutput]


def _optional_text(state: ForgetInput, key: str) -> str | None:
    value = state.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ForgetError(f"forget input {key!r} must be a string, got {type(value).__name__}")
    return value


def _user(state: ForgetInput, context: object) -> str:
    named = _optional_text(state, "user_id")
    if named:
        return named
    if not isinstance(context, Context):
        raise ContextError("the forget run has no Context.user_id: pass context={'user_id': ...}")
    return context.user_id


def build_forget_graph(states: ServerThreadStates | None = None) -> ForgetGraph:
    """Compile the forget graph; ``states`` defaults to the server's threads via the SDK."""

    async def forget(state: ForgetState, runtime: Runtime[Context]) -> ForgetOutput:
        """Forget on the run's Store and the server's threads; return the receipt."""
        store = runtime.store
        if store is None:
            raise ForgetStoreError(
                "the forget graph needs a Store: run it on a LangGraph server, which provides one"
            )
        dry_run = state.get("dry_run", False)
        if not isinstance(dry_run, bool):
            raise ForgetError("forget input 'dry_run' must be true or false")
        receipt = await aforget(
            store,
            states if states is not None else ServerThreadStates(),
            _user(state, runtime.context),
            fact=_optional_text(state, "fact"),
            text=_optional_text(state, "text"),
            thread_id=_optional_text(state, "thread_id"),
            dry_run=dry_run,
        )
        return {"receipt": receipt.as_dict()}

    builder = StateGraph(
        ForgetState, context_schema=Context, input_schema=ForgetInput, output_schema=ForgetOutput
    )
    builder.add_node("forget", forget)
    builder.add_edge(START, "forget")
    builder.add_edge("forget", END)
    return builder.compile(name=FORGET_GRAPH)
