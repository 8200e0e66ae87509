"""The built-in parts: compaction, memory, offloading, skills and subagents, one object each."""

from ctxgraph.nodes.parts.compaction import CompactionPart
from ctxgraph.nodes.parts.memory import MemoryPart
from ctxgraph.nodes.parts.offload import OffloadPart
from ctxgraph.nodes.parts.skills import SkillsPart
from ctxgraph.nodes.parts.subagents import SubagentsPart

__all__ = ["CompactionPart", "MemoryPart", "OffloadPart", "SkillsPart", "SubagentsPart"]
