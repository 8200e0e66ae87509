"""ctxgraph: verified compaction and governed long-term memory for LangGraph agents.

The public names below load on first use, so ``import ctxgraph`` (and the command line)
stays fast; ``from ctxgraph import build_graph`` works as usual.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ctxgraph.graph.builder import build_graph, create_builder
    from ctxgraph.graph.root import CtxGraph
    from ctxgraph.graph.subgraph import as_subgraph
    from ctxgraph.nodes.compaction.background import wait_for_jobs
    from ctxgraph.nodes.compaction.job_queue import JobQueue, ServerJobQueue
    from ctxgraph.nodes.compaction.summarizer import SUMMARY_PROMPT
    from ctxgraph.nodes.gates import Gate, GatedTool, ToolFilter
    from ctxgraph.nodes.memory.extract import EXTRACTION_PROMPT, ExtractionPrompt
    from ctxgraph.nodes.part import BeforeModel, Part, PartSetup, TurnMessage
    from ctxgraph.nodes.parts import (
        CompactionPart,
        MemoryPart,
        OffloadPart,
        SkillsPart,
        SubagentsPart,
    )
    from ctxgraph.nodes.tools.wrappers import ToolWrapper
    from ctxgraph.state.context import Context
    from ctxgraph.state.demo_model import demo_models
    from ctxgraph.state.demo_replies import demo_tools
    from ctxgraph.state.models import Models
    from ctxgraph.state.prompt_template import PromptTemplateError
    from ctxgraph.state.scripted_model import ScriptedChatModel
    from ctxgraph.state.settings import Settings
    from ctxgraph.state.subagents import SubagentSpec
    from ctxgraph.state.tokens import MessageCount, TokenCounter
    from ctxgraph.store.forget import forget
    from ctxgraph.store.memory.ranking import Ranker, scored_candidates
    from ctxgraph.store.memory.repository import MemoryRepository

__version__ = "0.2.0"

_EXPORTS = {
    "build_graph": "ctxgraph.graph.builder",
    "create_builder": "ctxgraph.graph.builder",
    "CtxGraph": "ctxgraph.graph.root",
    "as_subgraph": "ctxgraph.graph.subgraph",
    "JobQueue": "ctxgraph.nodes.compaction.job_queue",
    "ServerJobQueue": "ctxgraph.nodes.compaction.job_queue",
    "Gate": "ctxgraph.nodes.gates",
    "GatedTool": "ctxgraph.nodes.gates",
    "ToolFilter": "ctxgraph.nodes.gates",
    "BeforeModel": "ctxgraph.nodes.part",
    "Part": "ctxgraph.nodes.part",
    "PartSetup": "ctxgraph.nodes.part",
    "TurnMessage": "ctxgraph.nodes.part",
    "CompactionPart": "ctxgraph.nodes.parts",
    "MemoryPart": "ctxgraph.nodes.parts",
    "OffloadPart": "ctxgraph.nodes.parts",
    "SkillsPart": "ctxgraph.nodes.parts",
    "SubagentsPart": "ctxgraph.nodes.parts",
    "ToolWrapper": "ctxgraph.nodes.tools.wrappers",
    "Context": "ctxgraph.state.context",
    "Models": "ctxgraph.state.models",
    "Settings": "ctxgraph.state.settings",
    "SubagentSpec": "ctxgraph.state.subagents",
    "MessageCount": "ctxgraph.state.tokens",
    "Ranker": "ctxgraph.store.memory.ranking",
    "MemoryRepository": "ctxgraph.store.memory.repository",
    "demo_models": "ctxgraph.state.demo_model",
    "demo_tools": "ctxgraph.state.demo_replies",
    "wait_for_jobs": "ctxgraph.nodes.compaction.background",
    "SUMMARY_PROMPT": "ctxgraph.nodes.compaction.summarizer",
    "EXTRACTION_PROMPT": "ctxgraph.nodes.memory.extract",
    "ExtractionPrompt": "ctxgraph.nodes.memory.extract",
    "PromptTemplateError": "ctxgraph.state.prompt_template",
    "ScriptedChatModel": "ctxgraph.state.scripted_model",
    "TokenCounter": "ctxgraph.state.tokens",
    "forget": "ctxgraph.store.forget",
    "scored_candidates": "ctxgraph.store.memory.ranking",
}

__all__ = [
    "EXTRACTION_PROMPT",
    "SUMMARY_PROMPT",
    "BeforeModel",
    "CompactionPart",
    "Context",
    "CtxGraph",
    "ExtractionPrompt",
    "Gate",
    "GatedTool",
    "JobQueue",
    "MemoryPart",
    "MemoryRepository",
    "MessageCount",
    "Models",
    "OffloadPart",
    "Part",
    "PartSetup",
    "PromptTemplateError",
    "Ranker",
    "ScriptedChatModel",
    "ServerJobQueue",
    "Settings",
    "SkillsPart",
    "SubagentSpec",
    "SubagentsPart",
    "TokenCounter",
    "ToolFilter",
    "ToolWrapper",
    "TurnMessage",
    "__version__",
    "as_subgraph",
    "build_graph",
    "create_builder",
    "demo_models",
    "demo_tools",
    "forget",
    "scored_candidates",
    "wait_for_jobs",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module the first time it is asked for."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxgraph' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
