"""A graph's parts resolved: the built-in ones the caller replaced, the caller's own, old keywords.

``create_builder``, ``build_graph`` and ``as_subgraph`` take ``parts``; the keyword seams
they took before (``summary_prompt``, ``extraction_prompt``, ``ranker``, ``subagents``, and
for ``build_graph`` ``token_counter``, ``tool_wrappers`` and ``compaction_queue``) keep
working for one release, each with a ``DeprecationWarning`` naming its replacement.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ctxgraph.nodes.part import Part
from ctxgraph.nodes.parts import CompactionPart, MemoryPart, OffloadPart, SkillsPart, SubagentsPart
from ctxgraph.state.subagents import SubagentSpec

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
        f"{where}({name}=...) is deprecated and will be removed in the next release; "
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


@dataclass(frozen=True)
class GraphParts:
    """The parts of a graph: one of each built-in kind, then the caller's own."""

    compaction: CompactionPart
    memory: MemoryPart
    subagents: SubagentsPart
    offload: OffloadPart
    skills: SkillsPart | None
    extra: tuple[Part, ...]

    @classmethod
    def resolve(cls, parts: Sequence[Part] | None, old: Mapping[str, Any]) -> GraphParts:
        """The parts ``parts`` gives, the built-in defaults for the kinds it lacks.

        ``old`` are the deprecated keywords (``summary_prompt``, ``extraction_prompt``,
        ``ranker``, ``subagents``); each sets its seam on the part that takes it now.

        Raises:
            ValueError: ``parts`` holds two parts of one built-in kind.

        """
        found, extra = _by_kind(parts or ())
        memory = _of(found, MemoryPart, MemoryPart())
        if "extraction_prompt" in old or "ranker" in old:
            memory = MemoryPart(
                old.get("extraction_prompt", memory.extraction_prompt),
                old.get("ranker", memory.ranker),
            )
        skills = found.get(SkillsPart)
        return cls(
            compaction=CompactionPart(old["summary_prompt"])
            if "summary_prompt" in old
            else _of(found, CompactionPart, CompactionPart()),
            memory=memory,
            subagents=SubagentsPart(old["subagents"])
            if "subagents" in old
            else _of(found, SubagentsPart, SubagentsPart()),
            offload=_of(found, OffloadPart, OffloadPart()),
            skills=skills if isinstance(skills, SkillsPart) else None,
            extra=tuple(extra),
        )

    @property
    def all(self) -> list[Part]:
        """Every part, the built-in ones first."""
        built_in: list[Part] = [self.subagents, self.compaction, self.offload, self.memory]
        return [*built_in, *([self.skills] if self.skills else []), *self.extra]

    @property
    def specs(self) -> Sequence[SubagentSpec] | bool:
        """The subagents the graph delegates to."""
        return self.subagents.subagents


_BUILT_IN: tuple[type[Part], ...] = (
    CompactionPart,
    MemoryPart,
    SubagentsPart,
    OffloadPart,
    SkillsPart,
)


P = TypeVar("P", bound=Part)


def _by_kind(parts: Sequence[Part]) -> tuple[dict[type[Part], Part], list[Part]]:
    """The parts of a built-in kind by kind, and the others in order."""
    found: dict[type[Part], Part] = {}
    extra: list[Part] = []
    for part in parts:
        kind = next((k for k in _BUILT_IN if isinstance(part, k)), None)
        if kind is None:
            extra.append(part)
        elif kind in found:
            raise ValueError(f"parts holds two {kind.__name__}s; give one of each kind")
        else:
            found[kind] = part
    return found, extra


def _of(found: Mapping[type[Part], Part], kind: type[P], default: P) -> P:
    part = found.get(kind)
    return part if isinstance(part, kind) else default
