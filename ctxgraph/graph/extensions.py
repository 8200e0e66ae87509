"""The extension seams of a graph (prompts, token counter, tool wrappers, ranker), checked once.

``build_graph``, ``create_builder`` and ``as_subgraph`` take them as keyword arguments, as
LangChain's middleware constructors take theirs; ``None`` and ``()`` keep the built-in
behaviour. ``Extensions.checked`` refuses a bad one when the graph is built, naming the
argument, so nothing fails later inside a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxgraph.nodes.memory.extract import check_extraction_prompt
from ctxgraph.nodes.tools.wrappers import ToolWrapper
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import MessageCount, TokenCounter
from ctxgraph.store.memory.ranking import Ranker
from ctxgraph.store.memory.repository import RepositoryFactory

__all__ = ["Extensions"]


@dataclass(frozen=True)
class Extensions:
    """What a caller plugged into a graph; the defaults are the built-in behaviour."""

    summary_prompt: str | None = None
    """Replaces ``SUMMARY_PROMPT`` (checked by ``CompactNode``)."""
    extraction_prompt: str | None = None
    """Replaces ``EXTRACTION_PROMPT`` (``{profile}``, ``{facts}``, ``{conversation}``)."""
    token_counter: MessageCount | None = None
    """Counts the tokens of a list of messages; None counts with the offline tiktoken."""
    tool_wrappers: tuple[ToolWrapper, ...] = ()
    """Wrap every call of the tools node outside the built-in wrappers, first outermost."""
    ranker: Ranker | None = None
    """Orders memory search results and the memory view's matches; None is ``rank``."""

    @classmethod
    def checked(
        cls,
        *,
        summary_prompt: str | None = None,
        extraction_prompt: str | None = None,
        token_counter: MessageCount | None = None,
        tool_wrappers: Sequence[ToolWrapper] = (),
        ranker: Ranker | None = None,
    ) -> Extensions:
        """The extensions, each checked; the summary prompt is checked by ``CompactNode``.

        Raises:
            PromptTemplateError: ``extraction_prompt`` cannot be filled.
            TypeError: ``token_counter`` or ``ranker`` is not callable, or a tool wrapper
                lacks ``wrap`` or ``awrap``.

        """
        if extraction_prompt is not None:
            check_extraction_prompt(extraction_prompt)
        if token_counter is not None and not callable(token_counter):
            raise TypeError(
                "token_counter must be a callable taking a list of messages and returning "
                f"their tokens (e.g. count_tokens_approximately), got {token_counter!r}"
            )
        if ranker is not None and not isinstance(ranker, Ranker):
            raise TypeError(
                "ranker must be a callable (sources, top_k, now, age_from, *, query) -> "
                f"list[Fact] (see ctxgraph.store.memory.ranking.Ranker), got {ranker!r}"
            )
        wrappers = checked_wrappers(tool_wrappers)
        return cls(summary_prompt, extraction_prompt, token_counter, wrappers, ranker)

    def counter(self) -> TokenCounter:
        """The graph's one token counter: over ``token_counter`` when one was given."""
        return TokenCounter(count=self.token_counter)

    def repositories(self, settings: Settings) -> RepositoryFactory:
        """The factory of the graph's memory repositories, with its ranker and settings."""
        return RepositoryFactory(ranker=self.ranker, settings=settings)


def checked_wrappers(tool_wrappers: Sequence[ToolWrapper]) -> tuple[ToolWrapper, ...]:
    """``tool_wrappers`` as a tuple, each checked to have ``wrap`` and ``awrap``.

    Raises:
        TypeError: ``tool_wrappers`` is one wrapper, not a sequence, or one lacks a method.

    """
    if callable(getattr(tool_wrappers, "wrap", None)):
        raise TypeError(f"tool_wrappers takes a sequence, e.g. [{tool_wrappers!r}]")
    wrappers = tuple(tool_wrappers)
    for index, wrapper in enumerate(wrappers):
        missing = [name for name in ("wrap", "awrap") if not callable(getattr(wrapper, name, None))]
        if missing:
            raise TypeError(
                f"tool_wrappers[{index}] ({wrapper!r}) is not a ToolWrapper: it lacks "
                f"{' and '.join(missing)} (see ctxgraph.ToolWrapper)"
            )
    return wrappers
