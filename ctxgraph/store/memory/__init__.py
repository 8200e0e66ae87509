"""Long-term memory: the repository, its acceptance rules, fact records and the work queue."""

from ctxgraph.store.memory.bundle import (
    BundleError,
    ImportResult,
    aexport_bundle,
    aimport_bundle,
    export_bundle,
    import_bundle,
    verify_bundle,
)
from ctxgraph.store.memory.facts import Fact, Problem, Provenance
from ctxgraph.store.memory.ranking import Ranker, Source, rank, scored_candidates
from ctxgraph.store.memory.repository import MemoryRepository, RepositoryFactory
from ctxgraph.store.memory.rules import (
    Decision,
    FactCandidate,
    MemoryUpdate,
    ProfileUpdate,
    accept_candidate,
    accept_profile_update,
)
from ctxgraph.store.memory.writes import HISTORY_LIMIT, PROFILE_SECTIONS, SECTION_LIMIT

__all__ = [
    "HISTORY_LIMIT",
    "PROFILE_SECTIONS",
    "SECTION_LIMIT",
    "BundleError",
    "Decision",
    "Fact",
    "FactCandidate",
    "ImportResult",
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
    "aexport_bundle",
    "aimport_bundle",
    "export_bundle",
    "import_bundle",
    "rank",
    "scored_candidates",
    "verify_bundle",
]
