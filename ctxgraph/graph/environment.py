"""Builds the graph the way the CLI and ``langgraph.json`` configure it: from the environment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from ctxgraph.graph.builder import Graph, check_persistence, compile_graph, create_builder
from ctxgraph.graph.subagent_files import SubagentFileError, read_subagent_specs
from ctxgraph.nodes.compaction.commit import checkpoint_head
from ctxgraph.nodes.compaction.job_queue import JobQueue
from ctxgraph.nodes.part import Part
from ctxgraph.nodes.parts import SubagentsPart
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.state.models import SCRIPTED_MODEL_NAME, Models
from ctxgraph.state.settings import Settings
from ctxgraph.state.subagents import SubagentSpec

SUBAGENTS_VARIABLE = "CTXGRAPH_SUBAGENTS_DIR"
"""A folder of subagent ``.md`` files (see ``read_subagent_specs``); unset: no subagents."""


@dataclass(frozen=True)
class EnvironmentConfig:
    """Models, tools, settings and subagents as the environment configures them."""

    models: Models
    tools: tuple[BaseTool, ...]
    settings: Settings
    subagents: tuple[SubagentSpec, ...] = field(default=())
    """The specs read from ``CTXGRAPH_SUBAGENTS_DIR``; empty when it is unset."""

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> EnvironmentConfig:
        """Read and validate the configuration; fails before anything is started.

        ``CTXGRAPH_MODEL=scripted`` selects the offline demo model, which comes with the
        one tool it knows how to call.

        ``CTXGRAPH_SUBAGENTS_DIR`` names a folder of subagent ``.md`` files; their
        ``tools`` fields may name only the tools above (none unless scripted). Any bad
        file raises ``SubagentFileError``.
        """
        scripted = environ.get("CTXGRAPH_MODEL", "").strip() == SCRIPTED_MODEL_NAME
        tools = demo_tools() if scripted else ()
        return cls(
            models=Models.from_env(environ),
            tools=tools,
            settings=Settings.from_env(environ),
            subagents=_subagents(environ, tools),
        )

    def build(
        self,
        *,
        checkpointer: BaseCheckpointSaver[str] | None = None,
        store: BaseStore | None = None,
        compaction_queue: JobQueue | None = None,
        parts: Sequence[Part] = (),
        **seams: Any,
    ) -> Graph:
        """Compile the graph with this configuration, the given persistence and job queue.

        ``parts`` join the configured subagents' part (a ``SubagentsPart`` among them
        wins); ``seams`` are ``create_builder``'s ``tool_wrappers`` and ``token_counter``.
        """
        check_persistence(checkpointer, store)
        chosen = list(parts)
        if not any(isinstance(part, SubagentsPart) for part in chosen):
            chosen.insert(0, SubagentsPart(self.subagents))
        builder = create_builder(
            models=self.models,
            tools=self.tools,
            settings=self.settings,
            head=checkpoint_head(checkpointer),
            parts=chosen,
            compaction_queue=compaction_queue,
            **seams,
        )
        return compile_graph(builder, checkpointer=checkpointer, store=store)


def _subagents(environ: Mapping[str, str], tools: tuple[BaseTool, ...]) -> tuple[SubagentSpec, ...]:
    """The specs of the ``CTXGRAPH_SUBAGENTS_DIR`` folder, read with ``tools`` by name."""
    folder = environ.get(SUBAGENTS_VARIABLE, "").strip()
    if not folder:
        return ()
    try:
        return read_subagent_specs(folder, {tool.name: tool for tool in tools})
    except SubagentFileError as error:
        raise SubagentFileError(f"{SUBAGENTS_VARIABLE}: {error}") from None
