"""Where the memory view sat in the last main-model request (``state["memory_placement"]``)."""

from __future__ import annotations

from typing_extensions import TypedDict


class MemoryPlacement(TypedDict):
    """The window message the memory view was placed before, and which view it was.

    While the view's text is unchanged (same ``digest``) and the ``before`` message is still
    in the window, later requests place the view at the same spot, so the request prefix up
    to the latest turn stays byte-identical for a provider's prompt cache.
    """

    before: str | None
    """Id of the window message the view preceded; None when the window had no message."""
    digest: str
    """The first 16 hex digits of the SHA-256 of the view's text."""
