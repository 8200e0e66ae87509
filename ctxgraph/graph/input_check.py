"""Rejects malformed input inside the graph's first task, so a bad call writes nothing.

LangGraph saves a task's writes before reducers apply them, and a task that fails after
writing saves its writes along with the error; either way a bad ``messages`` value would
stay in the checkpoint and break every later read of the thread. A task that raises
before it writes saves nothing. So the check runs as the ``bound`` runnable of the
``__start__`` node: a compiled graph's ``nodes`` map node names to Pregel nodes, whose
``bound`` runs before the ``writers`` that copy the input into state, and whose
``channels``, when a list, are read into a dict passed to ``bound``. Reading ``messages``
there gives the check the thread's current messages.

This needs no private name of LangGraph, but it does rely on how ``StateGraph.compile``
lays out ``__start__`` (reads the ``__start__`` channel, runs an identity ``bound``, then
writes). ``attach_input_check`` verifies that layout and raises ``InputCheckLayoutError``
naming this module when a LangGraph upgrade changes it.

The same task checks the run's identity first: the ``thread_id`` of the config must
follow the thread id rule (``validate_thread_id``), the run must carry a ``Context``, and
a thread whose recorded owner is another user is refused (``ThreadOwnerError``). Only
when every check passes does the task record the run's user as the owner of an unowned
thread, so a refused run writes nothing to state or to the Store.

LangGraph saves the run's input in a checkpoint of its own (``source: "input"``) before
the first task runs, so a check inside that task still leaves that checkpoint behind.
``attach_input_check`` therefore also makes the compiled graph a ``CheckedGraph``, whose
``stream``/``astream`` (and so ``invoke``/``ainvoke``) make the same identity checks
before LangGraph starts the run: a bad ``thread_id``, a context LangGraph could not
build, or another user's thread (when the graph was compiled with its Store) is refused
before anything at all is saved. The check in the first task stays for runs that get
their Store or context from elsewhere (a LangGraph server, a parent graph).

Text the thread's storage cannot hold (NUL, a lone surrogate: ``check_storable``) is
refused by both: ``CheckedGraph`` before the input checkpoint, the first task otherwise.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import get_runtime
from langgraph.store.base import BaseStore

from ctxgraph.state.context import (
    Context,
    check_auth_user,
    require_context,
    validate_thread_id,
)
from ctxgraph.state.messages import check_input, check_input_text
from ctxgraph.store.ownership import (
    arecord_owner,
    athread_owner,
    check_thread_owner,
    record_owner,
    thread_owner,
)

MESSAGES = "messages"
"""The state channel the check reads (the thread's current messages) and validates."""


class InputCheckLayoutError(RuntimeError):
    """The compiled graph's ``__start__`` node no longer has the layout the check needs."""


def _identity(config: RunnableConfig) -> tuple[str | None, Context, BaseStore | None]:
    """The run's checked thread id (None without one), its context, and its Store."""
    raw = (config.get("configurable") or {}).get("thread_id")
    thread_id = None if raw is None else validate_thread_id(raw, "thread_id")
    runtime = get_runtime(Context)
    return thread_id, check_auth_user(require_context(runtime.context), config), runtime.store


def _validated(value: Mapping[str, Any]) -> Any:
    """Validate the input against the current messages and return the input."""
    update = value[START]
    current = value.get(MESSAGES)
    check_input(list(current) if current else [], update)
    return update


def _check(value: Mapping[str, Any], config: RunnableConfig) -> Any:
    """Check the identity and the input; claim an unowned thread; pass the input on."""
    thread_id, context, store = _identity(config)
    owner = None
    if thread_id is not None and store is not None:
        owner = thread_owner(store, thread_id)
        check_thread_owner(owner, thread_id, context.user_id)
    update = _validated(value)
    if thread_id is not None and store is not None and owner is None:
        record_owner(store, thread_id, context.user_id)
    return update


async def _acheck(value: Mapping[str, Any], config: RunnableConfig) -> Any:
    """Async :func:`_check`."""
    thread_id, context, store = _identity(config)
    owner = None
    if thread_id is not None and store is not None:
        owner = await athread_owner(store, thread_id)
        check_thread_owner(owner, thread_id, context.user_id)
    update = _validated(value)
    if thread_id is not None and store is not None and owner is None:
        await arecord_owner(store, thread_id, context.user_id)
    return update


def _precheck_identity(
    config: RunnableConfig | None, context: object, *, top_level: bool
) -> tuple[str | None, Context | None]:
    """The config's checked thread id and the run's ``Context``, when the caller gave one.

    A ``top_level`` graph (compiled with its own checkpointer) gets its context only from
    the caller, so a missing one is refused here; a graph run inside a parent may get it
    from the parent, and the first task checks it.
    """
    raw = ((config or {}).get("configurable") or {}).get("thread_id")
    thread_id = None if raw is None else validate_thread_id(raw, "thread_id")
    if isinstance(context, Mapping):
        context = Context(**context)
    if top_level:
        context = require_context(context)
    checked = check_auth_user(context, config) if isinstance(context, Context) else None
    return thread_id, checked


class CheckedGraph(CompiledStateGraph[Any, Any, Any, Any]):
    """A compiled graph that checks the run's identity before LangGraph saves anything."""

    def _precheck(
        self, config: RunnableConfig | None, context: object
    ) -> tuple[str | None, Context | None, BaseStore | None]:
        """Check the identity; return the thread id, context and Store for the owner check."""
        top_level = isinstance(self.checkpointer, BaseCheckpointSaver)
        thread_id, checked = _precheck_identity(config, context, top_level=top_level)
        return thread_id, checked, self._owner_store(thread_id, checked)

    def _owner_store(self, thread_id: str | None, context: Context | None) -> BaseStore | None:
        """The Store to check the owner in, when there is a thread, a user and a Store."""
        if thread_id is None or context is None or not isinstance(self.store, BaseStore):
            return None
        return self.store

    def stream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """``CompiledStateGraph.stream`` after the identity checks (raised at the call)."""
        check_input_text(input)  # NUL or a lone surrogate: refused before anything is saved
        thread_id, checked, store = self._precheck(config, context)
        if store is not None and thread_id is not None and checked is not None:
            check_thread_owner(thread_owner(store, thread_id), thread_id, checked.user_id)
        return super().stream(input, config, context=context, **kwargs)

    async def astream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """``CompiledStateGraph.astream`` after the identity checks."""
        check_input_text(input)
        thread_id, checked, store = self._precheck(config, context)
        if store is not None and thread_id is not None and checked is not None:
            owner = await athread_owner(store, thread_id)
            check_thread_owner(owner, thread_id, checked.user_id)
        async for chunk in super().astream(input, config, context=context, **kwargs):
            yield chunk


def attach_input_check(compiled: CompiledStateGraph[Any, Any, Any, Any]) -> None:
    """Make the ``__start__`` task validate the input before it is written to state.

    Also makes ``compiled`` a ``CheckedGraph``, which checks the run's identity before
    LangGraph saves the input checkpoint (see the module docstring).

    Raises ``InputCheckLayoutError`` when the graph's ``__start__`` node is not laid out
    as this module expects (see the module docstring).
    """
    start = compiled.nodes.get(START)
    if (
        start is None
        or start.channels != START
        or start.triggers != [START]
        or start.mapper is not None
        or not start.writers
        or MESSAGES not in compiled.channels
    ):
        raise InputCheckLayoutError(
            "ctxgraph.graph.input_check: the compiled graph's __start__ node no longer reads "
            "only the __start__ channel and writes the input to state; LangGraph changed how "
            "StateGraph compiles START, so malformed input could be written to the thread. "
            "Update ctxgraph/graph/input_check.py for this LangGraph version."
        )
    compiled.__class__ = CheckedGraph
    compiled.nodes[START] = start.copy(
        {
            "bound": RunnableLambda(_check, afunc=_acheck, name="check_input"),
            "channels": [START, MESSAGES],
        }
    )
