"""The three chat-model roles (main, summary, memory) and how to configure them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel

SCRIPTED_MODEL_NAME = "scripted"
"""Value of ``CTXGRAPH_MODEL`` that selects the offline demo model (``state.demo_model``)."""

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Endpoint used when ``OPENAI_BASE_URL`` is not set."""

ENVIRONMENT_HELP = (
    "no chat model is configured: set CTXGRAPH_MODEL (e.g. gpt-4o-mini) and OPENAI_API_KEY, "
    "or OPENAI_BASE_URL for an OpenAI-compatible server; CTXGRAPH_MODEL=scripted runs offline"
)


class ModelConfigError(ValueError):
    """The model configuration is missing or unusable; the message says what to set."""


@dataclass(frozen=True)
class Models:
    """Chat models for each role; ``summary`` and ``memory`` fall back to ``main``."""

    main: BaseChatModel
    summary: BaseChatModel | None = None
    memory: BaseChatModel | None = None

    def __post_init__(self) -> None:
        for role in ("main", "summary", "memory"):
            value = getattr(self, role)
            if value is None and role != "main":
                continue
            if not isinstance(value, BaseChatModel):
                raise ModelConfigError(
                    f"Models.{role} must be a LangChain chat model (BaseChatModel), got {value!r}"
                )

    @property
    def summary_model(self) -> BaseChatModel:
        """The model that writes compaction summaries."""
        return self.summary or self.main

    @property
    def memory_model(self) -> BaseChatModel:
        """The model that extracts long-term memory."""
        return self.memory or self.main

    @classmethod
    def openai(
        cls,
        model: str,
        *,
        summary_model: str | None = None,
        memory_model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
    ) -> Models:
        """Build ``ChatOpenAI`` models for the three roles on one OpenAI-compatible endpoint."""
        from langchain_openai import ChatOpenAI
        from pydantic import SecretStr

        if not api_key and not base_url:
            raise ModelConfigError(ENVIRONMENT_HELP)
        # Local OpenAI-compatible servers usually accept any key; the client insists on one.
        key = SecretStr(api_key or "not-needed")

        def make(name: str) -> BaseChatModel:
            return ChatOpenAI(model=name, base_url=base_url, api_key=key)

        main = make(model)
        return cls(
            main=main,
            summary=make(summary_model) if summary_model and summary_model != model else None,
            memory=make(memory_model) if memory_model and memory_model != model else None,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Models:
        """Read ``CTXGRAPH_MODEL`` and friends from ``environ`` (pass ``os.environ``)."""
        name = environ.get("CTXGRAPH_MODEL", "").strip()
        if not name:
            raise ModelConfigError(ENVIRONMENT_HELP)
        if name == SCRIPTED_MODEL_NAME:
            from ctxgraph.state.demo_model import demo_models

            return demo_models()
        base_url = environ.get("OPENAI_BASE_URL", "").strip()
        api_key = environ.get("OPENAI_API_KEY", "").strip()
        if not base_url and not api_key:
            raise ModelConfigError(ENVIRONMENT_HELP)
        return cls.openai(
            name,
            summary_model=environ.get("CTXGRAPH_SUMMARY_MODEL") or None,
            memory_model=environ.get("CTXGRAPH_MEMORY_MODEL") or None,
            # Explicit, so the client does not fall back to variables outside ``environ``.
            base_url=base_url or OPENAI_BASE_URL,
            api_key=api_key or None,
        )


def input_window(model: BaseChatModel, configured: int | None) -> int | None:
    """Return the main model's input window: the provider's report, else the configured size."""
    profile = getattr(model, "profile", None)
    if isinstance(profile, Mapping):
        reported = profile.get("max_input_tokens")
        if isinstance(reported, int) and not isinstance(reported, bool) and reported > 0:
            return reported
    return configured
