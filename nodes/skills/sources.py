"""One skill catalog per configuration, shared by the nodes and tools of a graph."""

from __future__ import annotations

import threading

from langgraph.store.base import BaseStore

from ctxgraph.state.settings import Settings
from ctxgraph.store.skills import EMPTY_SNAPSHOT, SkillCatalog, SkillSnapshot

_CatalogKey = tuple[tuple[str, ...], bool, tuple[str, ...]]


def _key(settings: Settings) -> _CatalogKey:
    return (settings.skills_dirs, settings.skills_from_store, settings.skills_disabled)


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
                self._first_reading(catalog)
            return catalog

    @staticmethod
    def _first_reading(catalog: SkillCatalog) -> None:
        """Read the folders once, so requests measured before any model call list them."""
        catalog.refresh(None)

    def current(self, settings: Settings) -> SkillSnapshot:
        """The latest reading for ``settings`` (read the folders first if never read)."""
        if not has_sources(settings):
            return EMPTY_SNAPSHOT
        return self.catalog(settings).latest

    def refresh(self, settings: Settings, store: BaseStore | None) -> SkillSnapshot:
        """Read the sources again; cheap when nothing changed."""
        if not has_sources(settings):
            return EMPTY_SNAPSHOT
        return self.catalog(settings).refresh(store)

    async def arefresh(self, settings: Settings, store: BaseStore | None) -> SkillSnapshot:
        """Async :meth:`refresh` (the Store is read with its async methods)."""
        if not has_sources(settings):
            return EMPTY_SNAPSHOT
        return await self.catalog(settings).arefresh(store)
