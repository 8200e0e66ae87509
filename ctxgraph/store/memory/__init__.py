"""Long-term memory: the repository, its acceptance rules, fact records and the work queue."""

from ctxgraph.store.memory.ranking import Ranker, Source, rank, scored_candidates
from ctxgraph.store.memory.repository import (
    HISTORY_LIMIT,
    PROFILE_SECTIONS,
    SECTION_LIMIT,
    Decision,
    Fact,
    FactCandidate,
    MemoryRepository,
    MemoryUpdate,
    Problem,
    ProfileUpdate,
    Provenance,
    RepositoryFactory,
    accept_candidate,
    accept_profile_update,
)

__all__ = [
    "HISTORY_LIMIT",
    "PROFILE_SECTIONS",
    "SECTION_LIMIT",
    "Decision",
    "Fact",
    "FactCandidate",
    "MemoryRepository",
    "MemoryUpdate",
    "Problem",
    "ProfileUpdate",
    "Provenance",
    "Ranker",
    "RepositoryFactory",
    "Source",
    "accept_candidate",
    "accept_profile_update",
    "rank",
    "scored_candidates",
]
