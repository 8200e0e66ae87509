"""Pieces several benchmarks share: percentiles, medians, versions and the persistence."""

from __future__ import annotations

import argparse
import atexit
import math
import shutil
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.store.persistence.connection import open_persistence


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (``share`` in (0, 1])."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


def median(values: Sequence[float]) -> float:
    """The median, or NaN for no values."""
    return statistics.median(values) if values else math.nan


def package_version(package: str) -> str:
    """The installed version of ``package``, or ``?``."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


@dataclass(frozen=True)
class Backend:
    """A checkpointer and the Store that goes with it."""

    checkpointer: BaseCheckpointSaver[Any]
    store: BaseStore


BACKENDS = ("postgres", "memory")
"""The ``--backend`` choices: Postgres (embedded or ``--database-uri``) or in memory."""


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--backend`` (default postgres) and ``--database-uri``."""
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="postgres",
        help="postgres: a Postgres checkpointer and Store (default); memory: LangGraph's "
        "InMemorySaver and InMemoryStore",
    )
    parser.add_argument(
        "--database-uri",
        default=None,
        help="Postgres URI (default: an embedded Postgres in a temporary folder)",
    )


def backend_label(kind: str, database_uri: str | None) -> str:
    """How a report names the backend ``open_backend(kind, database_uri)`` opens."""
    if kind == "memory":
        return "in-memory checkpointer (InMemorySaver) and Store (InMemoryStore)"
    where = "given URI" if database_uri else "embedded, temporary folder"
    return f"Postgres checkpointer and Store ({where})"


@contextmanager
def open_backend(kind: str, database_uri: str | None) -> Iterator[Backend]:
    """In-memory saver and store (``kind="memory"``), or Postgres (the URI or embedded)."""
    if kind == "memory":
        yield Backend(InMemorySaver(), InMemoryStore())
        return
    with postgres(database_uri) as uri, open_persistence(uri) as persistence:
        yield Backend(persistence.checkpointer, persistence.store)


@contextmanager
def postgres(uri: str | None) -> Iterator[str]:
    """The given URI, or an embedded Postgres in a temporary folder removed at exit."""
    if uri:
        yield uri
        return
    from ctxgraph.store.persistence.embedded import embedded_uri

    home = Path(tempfile.mkdtemp(prefix="ctxgraph-bench-"))
    # Registered before the server starts, so it runs after the server's own stop at exit.
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    yield embedded_uri(home / "home")
