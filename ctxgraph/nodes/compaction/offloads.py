"""The compact step's offloads: large user inputs and old tool arguments become artifacts."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore

from ctxgraph.nodes.compaction.triggers import args_offload_due
from ctxgraph.nodes.offload.args import LongArgument, long_arguments, offload_arguments
from ctxgraph.nodes.offload.inputs import large_inputs, offload_inputs
from ctxgraph.nodes.offload.orphans import OrphanSweep
from ctxgraph.nodes.offload.refs import live_refs
from ctxgraph.nodes.request_size import RequestSize
from ctxgraph.state.context import ContextError, validate_thread_id
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.sans_io import Flow, io
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.store.artifacts import ArtifactStore

logger = logging.getLogger("ctxgraph.offload")

Measure = Callable[[AgentState, Settings], RequestSize]
"""Measures the request of a state."""
Split = Callable[[AgentState, Settings], tuple[list[AnyMessage], list[AnyMessage]]]
"""The ``(old, kept)`` split compaction would use (``CompactionPlanner.split``)."""


@dataclass
class Offloaded:
    """What a compact step's offloads did, and the request's size after them."""

    size: RequestSize
    """The request after the offloads (as measured before them, when there was no work)."""
    pending: bool = False
    """True when there was offloading to do (even if a write failed)."""
    messages: dict[str, AnyMessage] = field(default_factory=dict)
    """Replacement messages by id; each keeps the id of the message it replaces."""
    refs: list[str] = field(default_factory=list)
    """Refs written by this step."""

    def add(self, messages: Sequence[AnyMessage], refs: Sequence[str]) -> None:
        """Record replacements and the refs written for them."""
        self.messages.update((str(m.id), m) for m in messages)
        self.refs.extend(refs)

    def applied(self, state: AgentState) -> AgentState:
        """``state`` with each replaced message swapped in at its place."""
        if not self.messages:
            return state
        window = [self.messages.get(str(m.id), m) for m in state.get("messages") or []]
        return {**state, "messages": window}

    def update(self) -> dict[str, Any]:
        """The state update of an offload-only step: the replacements, under their ids."""
        return {"messages": list(self.messages.values())} if self.messages else {}

    def merged(self, update: dict[str, Any]) -> dict[str, Any]:
        """A compaction's ``update`` with the replacements, unless it rewrote the window.

        A committed compaction's window (``RemoveMessage(REMOVE_ALL)`` and the kept
        messages) was taken from the offloaded state, so it holds the replacements already.
        """
        if "messages" in update or not self.messages:
            return update
        return {**update, **self.update()}


@dataclass(frozen=True)
class _Target:
    """Where this step's artifacts go, or why there is nowhere."""

    artifacts: ArtifactStore | None
    unavailable: str


def _target(store: BaseStore | None, config: RunnableConfig) -> _Target:
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if store is None:
        return _Target(None, "this run has no LangGraph Store to keep artifacts in")
    try:
        thread = validate_thread_id(thread_id)
    except ContextError as error:
        return _Target(None, f"this run has no usable thread id ({error})")
    return _Target(ArtifactStore(store, thread), "")


class StepOffloads:
    """Finds and applies the offloads of a compact step, sync or async, then keeps the quota.

    Large user inputs are offloaded whenever one is in the window; old tool arguments
    (outside the window compaction would keep) once the request reaches
    ``offload_args_fraction`` of the input window or of ``trigger_tokens``.
    """

    def __init__(
        self,
        measure: Measure,
        fresh_measure: Measure,
        split: Split,
        counter: TokenCounter | None = None,
    ) -> None:
        """Measure with ``measure`` (cached) and ``fresh_measure``, split with ``split``.

        ``fresh_measure`` must not cache by ``state_key``: offloading arguments changes
        the request without changing that key. ``counter`` (the graph's) sizes large
        inputs and long arguments; None counts them with tiktoken.
        """
        self._measure = measure
        self._fresh = fresh_measure
        self._split = split
        self._counter = counter
        self.orphans = OrphanSweep()
        """Removes artifacts of steps that never committed (at most once per grace period)."""

    def pending(
        self, state: AgentState, settings: Settings, size: RequestSize, window: int | None
    ) -> bool:
        """Whether the step has offloading to do; cheap when it has none."""
        messages = state.get("messages") or []
        if large_inputs(messages, settings, window, counter=self._counter):
            return True
        return bool(self._old_arguments(state, settings, size, window))

    def _old_arguments(
        self, state: AgentState, settings: Settings, size: RequestSize, window: int | None
    ) -> list[LongArgument]:
        if not args_offload_due(size, settings, window):
            return []
        if not long_arguments(state.get("messages") or [], settings, counter=self._counter):
            return []  # nothing long anywhere: no need to split
        old, _ = self._split(state, settings)
        return long_arguments(old, settings, counter=self._counter)

    def apply(
        self,
        state: AgentState,
        settings: Settings,
        window: int | None,
        store: BaseStore | None,
        config: RunnableConfig,
    ) -> Flow[Offloaded]:
        """Offload large inputs, then old arguments if due; evict over the quota.

        A flow (``ctxgraph.state.sans_io``): the node's sync and async paths drive it.
        """
        done = Offloaded(self._measure(state, settings))
        target = _target(store, config)
        inputs = large_inputs(state.get("messages") or [], settings, window, counter=self._counter)
        if inputs:
            offloaded = yield from offload_inputs(
                target.artifacts, inputs, unavailable=target.unavailable
            )
            self._record(done, offloaded.messages, offloaded.refs, state, settings)
        arguments = self._arguments(done, target, state, settings, window)
        artifacts = target.artifacts
        if artifacts is None:
            return done
        if arguments:
            stored = yield from offload_arguments(artifacts, arguments)
            self._record(done, stored.messages, stored.refs, state, settings)
        if done.refs:
            usage = yield from io(artifacts.usage_bytes, artifacts.ausage_bytes)
            if usage > settings.artifact_quota_bytes:
                keep = self._keep(done, state)
                quota = settings.artifact_quota_bytes
                self._evicted(
                    (yield from io(artifacts.evict, artifacts.aevict, quota, keep)), usage
                )
        try:
            yield from self.orphans.sweep_flow(artifacts, done.applied(state), done.refs, False)
        except Exception:  # the step's offloads stand; only the cleanup is left undone
            logger.warning("removing orphan artifacts failed", exc_info=True)
        return done

    def _arguments(
        self,
        done: Offloaded,
        target: _Target,
        state: AgentState,
        settings: Settings,
        window: int | None,
    ) -> list[LongArgument]:
        """The old arguments to offload, measured after the inputs were offloaded."""
        arguments = self._old_arguments(done.applied(state), settings, done.size, window)
        if arguments:
            done.pending = True
            if target.artifacts is None:
                logger.warning(
                    "%d long tool argument(s) stay in the conversation: %s",
                    len(arguments),
                    target.unavailable,
                )
        return arguments

    def _record(
        self,
        done: Offloaded,
        messages: Sequence[AnyMessage],
        refs: Sequence[str],
        state: AgentState,
        settings: Settings,
    ) -> None:
        done.pending = True
        if messages:
            done.add(messages, refs)
            done.size = self._fresh(done.applied(state), settings)

    @staticmethod
    def _keep(done: Offloaded, state: AgentState) -> set[str]:
        """Refs eviction must spare: those of the offloaded window and record, and new ones."""
        return live_refs(done.applied(state)) | set(done.refs)

    @staticmethod
    def _evicted(refs: Sequence[str], usage: int) -> None:
        if refs:
            logger.info(
                "artifact quota: %d bytes in use, evicted %d artifact(s): %s",
                usage,
                len(refs),
                ", ".join(refs),
            )
