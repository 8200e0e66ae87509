"""Per-thread artifacts: offloaded content kept in the Store and read back in pages."""

from ctxgraph.store.artifacts.grep import InvalidPatternError
from ctxgraph.store.artifacts.layout import CHUNK_BYTES, LINE_WINDOW, WINDOW_BYTES
from ctxgraph.store.artifacts.paging import MAX_LIMIT, MIN_PAGE_TOKENS, Page, reconstruct
from ctxgraph.store.artifacts.records import (
    Artifact,
    ArtifactError,
    ArtifactKind,
    ArtifactWriteError,
    DamagedArtifactError,
    UnknownArtifactError,
)
from ctxgraph.store.artifacts.store import ArtifactStore

__all__ = [
    "CHUNK_BYTES",
    "LINE_WINDOW",
    "MAX_LIMIT",
    "MIN_PAGE_TOKENS",
    "WINDOW_BYTES",
    "Artifact",
    "ArtifactError",
    "ArtifactKind",
    "ArtifactStore",
    "ArtifactWriteError",
    "DamagedArtifactError",
    "InvalidPatternError",
    "Page",
    "UnknownArtifactError",
    "reconstruct",
]
