"""The three chat-model roles (main, summary, memory) and how to configure them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from langchain_core.language_models import BaseChatModel

SCRIPTED_MODEL_NAME = "scripted"
"""Value of ``CTXGRAPH_MODEL`` that selects the offline demo model (``state.demo_replies``)."""

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Endpoint used when ``OPENAI_BASE_URL`` is not set."""

ENVIRONMENT_HELP = (
    "no chat model is configured: set CTXGRAPH_MODEL (e.g. gpt-4o-mini) and OPENAI_API_KEY, "
    "or OPENAI_BASE_URL for an OpenAI-compatible server; CTXGRAPH_MODEL=scripted runs offline"
)

TIMEOUT_VARIABLE = "CTXGRAPH_REQUEST_TIMEOUT"
"""Environment variable: seconds one model request may take before it fails."""

RETRIES_VARIABLE = "CTXGRAPH_MAX_RETRIES"
"""Environment variable: how often a failed model request is retried."""

DEFAULT_TIMEOUT = 120.0
"""Seconds one request to a model endpoint may take (each retry gets as long again)."""

DEFAULT_MAX_RETRIES = 2
"""Retries of a request that failed to connect, timed out, or got HTTP 408/409/429/5xx."""

LOCAL_HOSTS = ("localhost", "::1")
"""Host names of local endpoints, which need no ``OPENAI_API_KEY`` (as do 127.x.x.x)."""


class ModelConfigError(ValueError):
    """The model configuration is missing or unusable; the message says what to set."""


@dataclass(frozen=True)
class Models:
    """Chat models for each role; ``summary`` and ``memory`` fall back to ``main``.

    Args:
        main: The model that answers the user and calls the tools.
        summary: The model that writes compaction summaries; None uses ``main``.
        memory: The model that extracts long-term memory; None uses ``main``.

    Raises:
        ModelConfigError: ``main`` is not a LangChain chat model (``BaseChatModel``), or
            ``summary`` or ``memory`` is neither one nor None; the message names the role.

    """

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
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> Models:
        """Build ``ChatOpenAI`` models for the three roles on one OpenAI-compatible endpoint.

        Args:
            model: The main model's name.
            summary_model: The summary model's name; None (or ``model``) uses the main one.
            memory_model: The memory model's name; None (or ``model``) uses the main one.
            base_url: The endpoint; None is OpenAI's (then ``api_key`` is required).
            api_key: The endpoint's key; a local server needs none.
            timeout: Seconds one request may take, for every role.
            max_retries: Retries of a failed request, for every role.

        Returns:
            The models, sharing one endpoint, key and limits.

        Raises:
            ModelConfigError: Neither ``api_key`` nor ``base_url`` is given, or ``timeout``
                or ``max_retries`` is unusable.

        """
        from langchain_openai import ChatOpenAI
        from pydantic import SecretStr

        if not api_key and not base_url:
            raise ModelConfigError(missing_key_message(None))
        if isinstance(timeout, bool) or not (
            isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0
        ):
            raise ModelConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ModelConfigError(f"max_retries must be a whole number >= 0, got {max_retries!r}")
        # Local OpenAI-compatible servers usually accept any key; the client insists on one.
        key = SecretStr(api_key or "not-needed")

        def make(name: str) -> BaseChatModel:
            return ChatOpenAI(
                model=name,
                base_url=base_url,
                api_key=key,
                timeout=float(timeout),
                max_retries=max_retries,
            )

        main = make(model)
        return cls(
            main=main,
            summary=make(summary_model) if summary_model and summary_model != model else None,
            memory=make(memory_model) if memory_model and memory_model != model else None,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Models:
        """Read ``CTXGRAPH_MODEL`` and friends from ``environ`` (pass ``os.environ``).

        Args:
            environ: The environment. ``CTXGRAPH_MODEL`` names the main model
                (``scripted``: the offline demo model in every role);
                ``CTXGRAPH_SUMMARY_MODEL`` and ``CTXGRAPH_MEMORY_MODEL`` the other roles';
                ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` the endpoint;
                ``CTXGRAPH_REQUEST_TIMEOUT`` and ``CTXGRAPH_MAX_RETRIES`` the limits.

        Returns:
            The configured models; nothing is contacted yet.

        Raises:
            ModelConfigError: ``CTXGRAPH_MODEL`` is not set, a remote endpoint has no
                ``OPENAI_API_KEY``, or a limit is unusable; the message says what to set.

        """
        name = environ.get("CTXGRAPH_MODEL", "").strip()
        if not name:
            raise ModelConfigError(ENVIRONMENT_HELP)
        if name == SCRIPTED_MODEL_NAME:
            # Imported here, not at the top, so that importing this module loads no demo code.
            from ctxgraph.state.demo_replies import demo_role_models

            main, summary, memory = demo_role_models()
            return cls(main=main, summary=summary, memory=memory)
        base_url = environ.get("OPENAI_BASE_URL", "").strip()
        api_key = environ.get("OPENAI_API_KEY", "").strip()
        if not api_key and not is_local_endpoint(base_url):
            raise ModelConfigError(missing_key_message(base_url or None))
        timeout, retries = request_limits(environ)
        return cls.openai(
            name,
            summary_model=environ.get("CTXGRAPH_SUMMARY_MODEL") or None,
            memory_model=environ.get("CTXGRAPH_MEMORY_MODEL") or None,
            # Explicit, so the client does not fall back to variables outside ``environ``.
            base_url=base_url or OPENAI_BASE_URL,
            api_key=api_key or None,
            timeout=timeout,
            max_retries=retries,
        )


def is_local_endpoint(base_url: str) -> bool:
    """Whether ``base_url`` is on this machine (localhost, 127.x.x.x, ::1)."""
    if not base_url:
        return False
    try:
        host = urlsplit(base_url if "//" in base_url else f"//{base_url}").hostname or ""
    except ValueError:
        return False
    return host in LOCAL_HOSTS or host.startswith("127.")


def missing_key_message(base_url: str | None) -> str:
    """The one-line error for a remote endpoint without ``OPENAI_API_KEY``."""
    where = f"OPENAI_BASE_URL={base_url}" if base_url else f"the default {OPENAI_BASE_URL}"
    return (
        f"OPENAI_API_KEY is not set, and {where} is not a local server: set OPENAI_API_KEY, "
        "point OPENAI_BASE_URL at a local OpenAI-compatible server (localhost, 127.0.0.1), "
        "or set CTXGRAPH_MODEL=scripted to run offline"
    )


def request_limits(environ: Mapping[str, str]) -> tuple[float, int]:
    """``CTXGRAPH_REQUEST_TIMEOUT`` (seconds, default 120) and ``CTXGRAPH_MAX_RETRIES`` (2).

    Raises ``ModelConfigError`` naming the variable and its value when either is unusable.
    """
    timeout = DEFAULT_TIMEOUT
    text = environ.get(TIMEOUT_VARIABLE, "").strip()
    if text:
        try:
            timeout = float(text)
        except ValueError:
            timeout = math.nan
        if not math.isfinite(timeout) or timeout <= 0:
            raise ModelConfigError(
                f"{TIMEOUT_VARIABLE} must be a positive number of seconds, got {text!r}"
            )
    retries = DEFAULT_MAX_RETRIES
    text = environ.get(RETRIES_VARIABLE, "").strip()
    if text:
        if not text.isdigit():
            raise ModelConfigError(f"{RETRIES_VARIABLE} must be a whole number >= 0, got {text!r}")
        retries = int(text)
    return timeout, retries


def input_window(model: BaseChatModel, configured: int | None) -> int | None:
    """Return the main model's input window: the provider's report, else the configured size."""
    profile = getattr(model, "profile", None)
    if isinstance(profile, Mapping):
        reported = profile.get("max_input_tokens")
        if isinstance(reported, int) and not isinstance(reported, bool) and reported > 0:
            return reported
    return configured
