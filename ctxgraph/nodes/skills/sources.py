"""One skill catalog per configuration, shared by the nodes and tools of a graph."""

from __future__ import annotations

import asyncio
import threading

from langgraph.store.base import BaseStore

from ctxgraph.state.settings import Settings
from ctxgraph.store.skills import EMPTY_SNAPSHOT, SkillCatalog, SkillSnapshot

_CatalogKey = tuple[tuple[str, ...], bool, tuple[str, ...]]


def _key(settings: Settings) -> _CatalogKey:
    return (settings.skills_dirs, settings.skills_from_store, settings.skills_disabled)


def _event_loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def has_sources(settings: Settings) -> bool:
    """True when ``settings`` configure any skill source."""
    return bool(settings.skills_dirs) or settings.skills_from_store


class SkillSources:
    """The catalogs of a graph, one per distinct source configuration.

    A run's ``Context(settings=...)`` may point at other folders than the graph's; each
    configuration keeps its own cache of parsed skills.
    """

    def __init__(self) -> None:
        self._catalogs: dict[_CatalogKey, SkillCatalog] = {}
        self._lock = threading.Lock()
        self._read: set[_CatalogKey] = set()
        """Configurations read at least once."""

    def catalog(self, settings: Settings) -> SkillCatalog:
        """The catalog reading the sources ``settings`` configure."""
        key = _key(settings)
        with self._lock:
            catalog = self._catalogs.get(key)
            if catalog is None:
                catalog = SkillCatalog(
                    settings.skills_dirs,
                    use_store=settings.skills_from_store,
                    disabled=settings.skills_disabled,
                )
                self._catalogs[key] = catalog
            return catalog

    def current(self, settings: Settings) -> SkillSnapshot:
        """The latest reading for ``settings``.

        The model node reads the sources again before every call. Before the first
        reading of a configuration, the folders are read here when no event loop runs
        (a sync run), so the first request of a process is measured with its skills; in
        an async run that would block the loop, and the latest (empty) reading is used
        until the model node's own reading moments later.
        """
        if not has_sources(settings):
            return EMPTY_SNAPSHOT
        catalog = self.catalog(settings)
        if _key(settings) not in self._read and not _event_loop_running():
            return self.refresh(settings, None)
        return catalog.latest

    def refresh(self, settings: Settings, store: BaseStore | None) -> SkillSnapshot:
        """Read the sources again; cheap when nothing changed."""
        if not has_sources(settings):
            return EMPTY_SNAPSHOT
        snapshot = self.catalog(settings).refresh(store)
        self._read.add(_key(settings))
        return snapshot

    async def arefresh(self, settings: Settings, store: BaseStore | None) -> SkillSnapshot:
        """Async :meth:`refresh` (the Store is read with its async methods)."""
        if not has_sources(settings):
            return EMPTY_SNAPSHOT
        snapshot = await self.catalog(settings).arefresh(store)
        self._read.add(_key(settings))
        return snapshot
