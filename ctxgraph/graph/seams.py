"""The keywords the graph builders took before parts, still accepted until 0.3.0.

``create_builder``, ``build_graph`` and ``as_subgraph`` take ``parts``; the keyword seams
they took before (``summary_prompt``, ``extraction_prompt``, ``ranker``, ``subagents``, and
for ``build_graph`` ``token_counter``, ``tool_wrappers`` and ``compaction_queue``) keep
working until ``REMOVED_IN``, each with a ``DeprecationWarning`` naming its replacement.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ctxgraph.graph.assembly import part_of
from ctxgraph.nodes.part import Part
from ctxgraph.nodes.parts import CompactionPart, MemoryPart, SubagentsPart

REMOVED_IN = "0.3.0"
"""The release that removes the deprecated keywords."""
PART_KEYWORDS = {
    "summary_prompt": "parts=[CompactionPart(summary_prompt=...)]",
    "extraction_prompt": "parts=[MemoryPart(extraction_prompt=...)]",
    "ranker": "parts=[MemoryPart(ranker=...)]",
    "subagents": "parts=[SubagentsPart(subagents)]",
}
"""The old seam keywords a part now takes, and what replaces each."""
ROOT_KEYWORDS = {
    "token_counter": "CtxGraph(..., token_counter=...).agent(...)",
    "tool_wrappers": "CtxGraph(..., tool_wrappers=...).agent(...)",
    "compaction_queue": "CtxGraph(...).agent(compaction_queue=...)",
}
"""The old ``build_graph`` keywords the root takes now, and what replaces each."""


def warn_deprecated(name: str, replacement: str, where: str) -> None:
    """Warn that ``where(name=...)`` is deprecated in favour of ``replacement``."""
    warnings.warn(
        f"{where}({name}=...) is deprecated and will be removed in ctxgraph {REMOVED_IN}; "
        f"use {replacement}",
        DeprecationWarning,
        stacklevel=4,
    )


def old_keywords(
    given: Mapping[str, Any], allowed: Mapping[str, str], where: str
) -> dict[str, Any]:
    """The old keywords of ``given``, each warned about; raises for an unknown one."""
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise TypeError(f"{where}() got unexpected keyword arguments {unknown}")
    for name in given:
        warn_deprecated(name, allowed[name], where)
    return dict(given)


def with_old_parts(parts: Sequence[Part] | None, old: Mapping[str, Any]) -> list[Part] | None:
    """``parts`` with the old part keywords of ``old`` set on the parts that take them now."""
    if not old:
        return None if parts is None else list(parts)
    chosen = list(parts or ())

    def put(kind: type[Part], part: Part) -> None:
        chosen[:] = [p for p in chosen if not isinstance(p, kind)] + [part]

    if "summary_prompt" in old:
        put(CompactionPart, CompactionPart(old["summary_prompt"]))
    if "extraction_prompt" in old or "ranker" in old:
        memory = part_of(chosen, MemoryPart) or MemoryPart()
        prompt = old.get("extraction_prompt", memory.extraction_prompt)
        put(MemoryPart, MemoryPart(prompt, old.get("ranker", memory.ranker)))
    if "subagents" in old:
        put(SubagentsPart, SubagentsPart(old["subagents"]))
    return chosen
