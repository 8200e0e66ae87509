"""Tunable behaviour of a ctxgraph graph, validated in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful assistant working inside a long-running session. "
    "Use the tools you are given when they help, and say plainly when you do not know."
)


class SettingsError(ValueError):
    """A setting has a value that cannot work; the message names it and what would."""


@dataclass(kw_only=True, frozen=True)
class Settings:
    """Behaviour knobs shared by every node; validated on construction."""

    system_prompt: str = field(
        default=DEFAULT_SYSTEM_PROMPT,
        metadata={"description": "System rules placed first in every main-model request."},
    )
    context_window: int | None = field(
        default=None,
        metadata={
            "description": "Input-window size of the main model in tokens, used when the "
            "provider does not report one (env CTXGRAPH_CONTEXT_WINDOW)."
        },
    )

    def __post_init__(self) -> None:
        if not isinstance(self.system_prompt, str) or not self.system_prompt.strip():
            raise SettingsError(
                f"Settings.system_prompt must be a non-empty string, got {self.system_prompt!r}"
            )
        window = self.context_window
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 256
        ):
            raise SettingsError(
                "Settings.context_window must be an integer of at least 256 tokens "
                f"(for example 128000) or None, got {window!r}"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Settings:
        """Build settings from a plain mapping (as a LangGraph server sends them)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise SettingsError(f"unknown setting(s) {unknown}; known settings are {sorted(known)}")
        return cls(**dict(values))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Read the settings that have environment variables (pass ``os.environ``)."""
        values: dict[str, Any] = {}
        window = environ.get("CTXGRAPH_CONTEXT_WINDOW", "").strip()
        if window:
            try:
                values["context_window"] = int(window)
            except ValueError:
                raise SettingsError(
                    f"CTXGRAPH_CONTEXT_WINDOW must be a whole number of tokens, got {window!r}"
                ) from None
        return cls(**values)

    @staticmethod
    def describe() -> dict[str, str]:
        """Return each setting's description, keyed by name (used by docs and the CLI)."""
        return {f.name: str(f.metadata.get("description", "")) for f in fields(Settings)}
