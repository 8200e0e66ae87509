"""What the memory view and ``memory_search`` share: the settings, repositories, counter."""

from __future__ import annotations

from ctxgraph.nodes.settings import effective_settings
from ctxgraph.state.context import Context
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.store.memory.repository import RepositoryFactory

__all__ = ["MemoryReader"]


class MemoryReader:
    """Reads a run's memory: the graph's settings, its repository factory and counter.

    ``repositories`` gives the repository of the run's Store, with the graph's ranker;
    ``counter`` measures what is read against its budget (None counts with tiktoken).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        repositories: RepositoryFactory | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        self._settings = settings
        self._repositories = repositories or RepositoryFactory(settings=settings)
        self._counter = counter

    def _settings_for(self, context: Context) -> Settings:
        """The graph's settings with the run's overrides, as every node sees them."""
        return effective_settings(context, self._settings)
