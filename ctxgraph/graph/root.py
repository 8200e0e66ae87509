"""``CtxGraph``: one root that builds every graph ctxgraph serves, from one set of seams."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from ctxgraph.graph.assembly import checked_counter, checked_wrappers, ordered_parts, part_of
from ctxgraph.graph.builder import Builder, Graph, check_persistence, compile_graph, create_builder
from ctxgraph.graph.compaction_worker_graph import CompactionWorkerGraph, build_compaction_worker
from ctxgraph.graph.environment import EnvironmentConfig
from ctxgraph.graph.forgetting import ForgetGraph, build_forget_graph
from ctxgraph.graph.memory_worker_graph import WorkerGraph, build_worker_graph
from ctxgraph.graph.subgraph import SubgraphNode, as_subgraph
from ctxgraph.nodes.compaction.commit import ThreadHead, checkpoint_head
from ctxgraph.nodes.compaction.job_queue import JobQueue
from ctxgraph.nodes.part import Part
from ctxgraph.nodes.parts import CompactionPart, MemoryPart, SubagentsPart
from ctxgraph.nodes.tools.wrappers import ToolWrapper
from ctxgraph.state.models import Models
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import MessageCount

__all__ = ["CtxGraph"]


class CtxGraph:
    """Builds the agent, the subgraph node and the three worker graphs with the same seams.

    The seams are given once: the models, settings and tools, the parts (a
    ``CompactionPart(summary_prompt=...)`` or ``MemoryPart(extraction_prompt=...,
    ranker=...)`` replaces the built-in part of its kind; other parts follow the built-in
    ones), the tool wrappers and the token counter. So the memory worker extracts with the
    agent's extraction prompt and ranker, and the compaction worker counts with its token
    counter. ``langgraph.json``'s graphs all come from one instance
    (``ctxgraph.graph.served``).

    Example:
        ``root = CtxGraph(Models(main=model), parts=[MemoryPart(ranker=my_ranker)])``;
        ``graph = root.agent(checkpointer=saver, store=store)``;
        ``worker = root.memory_worker(store=store)``.

    """

    def __init__(
        self,
        models: Models | None = None,
        settings: Settings | None = None,
        tools: Sequence[BaseTool] = (),
        parts: Sequence[Part] | None = None,
        tool_wrappers: Sequence[ToolWrapper] = (),
        token_counter: MessageCount | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """Check the seams once, so a bad one fails here, not inside a run.

        Args:
            models: The chat models; None reads them from the environment when a graph
                is built (the workers: when a run starts).
            settings: The settings (None: ``Settings()`` for the agent, the environment's
                for the memory worker, read when a run starts).
            tools: The caller's tools.
            parts: Parts replacing the built-in ones of their kind, and the caller's own.
            tool_wrappers: Wrap every call of the agent's ``tools`` node, first outermost.
            token_counter: Counts the tokens of a list of messages, in every graph.
            environ: Configures the agent's models, settings, tools and subagents when
                it is built, as the command line reads them (see ``from_env``).

        Raises:
            PromptTemplateError: A summary or extraction prompt cannot be filled.
            TypeError: The token counter, a ranker or a tool wrapper has the wrong shape.
            ValueError: Two parts are of one built-in kind.

        """
        self.models = models
        self.settings = settings
        self.tools = tuple(tools)
        self.parts = ordered_parts(parts, settings or Settings(), defaults=False)
        self.tool_wrappers = checked_wrappers(tool_wrappers)
        checked_counter(token_counter)
        self.token_counter = token_counter
        self._environ = environ

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        parts: Sequence[Part] | None = None,
        tool_wrappers: Sequence[ToolWrapper] = (),
        token_counter: MessageCount | None = None,
    ) -> CtxGraph:
        """A root configured by the environment, read when the agent is built.

        The models, settings, tools and subagents come from ``environ`` as the command
        line and ``langgraph.json`` read them (``EnvironmentConfig``); nothing is read
        here, so the workers load before a model is configured.
        """
        return cls(
            parts=parts, tool_wrappers=tool_wrappers, token_counter=token_counter, environ=environ
        )

    def _seams(self) -> dict[str, Any]:
        """The keywords the agent's builder and the subgraph node take alike."""
        return {
            "models": self.models if self.models is not None else Models.from_env(os.environ),
            "tools": self.tools,
            "settings": self.settings,
            "parts": self.parts,
            "tool_wrappers": self.tool_wrappers,
            "token_counter": self.token_counter,
        }

    def builder(
        self, *, head: ThreadHead | None = None, compaction_queue: JobQueue | None = None
    ) -> Builder:
        """The agent's uncompiled ``StateGraph`` (see ``create_builder``)."""
        return create_builder(**self._seams(), head=head, compaction_queue=compaction_queue)

    def agent(
        self,
        *,
        checkpointer: BaseCheckpointSaver[str] | None = None,
        store: BaseStore | None = None,
        compaction_queue: JobQueue | None = None,
    ) -> Graph:
        """The compiled agent graph with input checks (see ``build_graph``).

        Args:
            checkpointer: Any LangGraph checkpointer; needs ``store`` too.
            store: Any LangGraph Store.
            compaction_queue: Where background compaction jobs go (on a server,
                ``ServerJobQueue()``).

        Returns:
            The compiled graph.

        Raises:
            ValueError: A ``checkpointer`` without a ``store``.

        """
        check_persistence(checkpointer, store)
        if self._environ is not None:
            return EnvironmentConfig.read(self._environ).build(
                checkpointer=checkpointer,
                store=store,
                compaction_queue=compaction_queue,
                parts=[p for p in self.parts if not _without_subagents(p)],
                tool_wrappers=self.tool_wrappers,
                token_counter=self.token_counter,
            )
        builder = self.builder(
            head=checkpoint_head(checkpointer), compaction_queue=compaction_queue
        )
        return compile_graph(builder, checkpointer=checkpointer, store=store)

    def subgraph(self, *, name: str = "ctxgraph") -> SubgraphNode:
        """The agent as a node of a parent graph (see ``as_subgraph``)."""
        return as_subgraph(**self._seams(), name=name)

    def memory_worker(self, *, store: BaseStore | None = None) -> WorkerGraph:
        """The memory worker, extracting with this root's prompt, ranker and counter."""
        memory = part_of(self.parts, MemoryPart) or MemoryPart()
        return build_worker_graph(
            self.models,
            self.settings,
            store=store,
            extraction_prompt=memory.extraction_prompt,
            ranker=memory.ranker,
            token_counter=self.token_counter,
        )

    def compaction_worker(self, *, store: BaseStore | None = None) -> CompactionWorkerGraph:
        """The compaction worker, counting with this root's token counter."""
        return build_compaction_worker(
            self.models,
            store=store,
            token_counter=self.token_counter,
            summary_prompt=getattr(part_of(self.parts, CompactionPart), "summary_prompt", None),
        )

    def forget(self) -> ForgetGraph:
        """The forget graph a server serves (the server injects the Store)."""
        return build_forget_graph()


def _without_subagents(part: Part) -> bool:
    """A subagents part with no subagents: the environment's subagents are used instead."""
    return isinstance(part, SubagentsPart) and not part.subagents
