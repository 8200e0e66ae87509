"""The three chat-model roles (main, summary, memory) and how to configure them."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from langchain_core.language_models import BaseChatModel

SCRIPTED_MODEL_NAME = "scripted"
"""Value of ``CTXGRAPH_MODEL`` that selects the offline demo model (``state.demo_replies``)."""

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Endpoint used when ``OPENAI_BASE_URL`` is not set."""

ENVIRONMENT_HELP = (
    "no chat model is configured: set CTXGRAPH_MODEL (e.g. gpt-4o-mini) and OPENAI_API_KEY, "
    "or OPENAI_BASE_URL for an OpenAI-compatible server, or a provider:model name "
    "(e.g. anthropic:claude-sonnet-4-5); CTXGRAPH_MODEL=scripted runs offline"
)

ROLE_VARIABLES = {
    "main": "CTXGRAPH_MODEL",
    "summary": "CTXGRAPH_SUMMARY_MODEL",
    "memory": "CTXGRAPH_MEMORY_MODEL",
}
"""Environment variable naming each role's model (bare name or ``provider:model``)."""


@dataclass(frozen=True)
class Provider:
    """A ``provider:`` prefix that LangChain's ``init_chat_model`` can build a model for.

    Args:
        module: The module that holds the chat model class (checked before building).
        package: What to ``pip install`` when ``module`` is missing.
        key_variable: The provider's API key variable, passed on when ``environ`` has it.
        limits: Whether the class takes ``timeout`` and ``max_retries``.

    """

    module: str
    package: str
    key_variable: str | None = None
    limits: bool = False


PROVIDERS: Mapping[str, Provider] = {
    "anthropic": Provider("langchain_anthropic", "langchain-anthropic", "ANTHROPIC_API_KEY", True),
    "anthropic_bedrock": Provider("langchain_aws", "langchain-aws"),
    "azure_ai": Provider("langchain_azure_ai", "langchain-azure-ai"),
    "azure_openai": Provider("langchain_openai", "langchain-openai", "AZURE_OPENAI_API_KEY", True),
    "baseten": Provider("langchain_baseten", "langchain-baseten"),
    "bedrock": Provider("langchain_aws", "langchain-aws"),
    "bedrock_converse": Provider("langchain_aws", "langchain-aws"),
    "cohere": Provider("langchain_cohere", "langchain-cohere"),
    "deepseek": Provider("langchain_deepseek", "langchain-deepseek", "DEEPSEEK_API_KEY", True),
    "fireworks": Provider("langchain_fireworks", "langchain-fireworks"),
    "google_genai": Provider("langchain_google_genai", "langchain-google-genai"),
    "google_vertexai": Provider("langchain_google_vertexai", "langchain-google-vertexai"),
    "groq": Provider("langchain_groq", "langchain-groq", "GROQ_API_KEY", True),
    "huggingface": Provider("langchain_huggingface", "langchain-huggingface"),
    "ibm": Provider("langchain_ibm", "langchain-ibm"),
    "litellm": Provider("langchain_litellm", "langchain-litellm"),
    "mistralai": Provider("langchain_mistralai", "langchain-mistralai", "MISTRAL_API_KEY", True),
    "nvidia": Provider("langchain_nvidia_ai_endpoints", "langchain-nvidia-ai-endpoints"),
    "ollama": Provider("langchain_ollama", "langchain-ollama"),
    "openrouter": Provider("langchain_openrouter", "langchain-openrouter"),
    "perplexity": Provider("langchain_perplexity", "langchain-perplexity"),
    "together": Provider("langchain_together", "langchain-together"),
    "upstage": Provider("langchain_upstage", "langchain-upstage"),
    "xai": Provider("langchain_xai", "langchain-xai", "XAI_API_KEY", True),
}
"""Prefixes of ``provider:model`` names built through ``init_chat_model``.

``openai:`` is not listed: it means the OpenAI-compatible path of a bare name. A prefix
that is not listed (``qwen2.5:7b``) is part of a bare, OpenAI-compatible model name.
"""

OPENAI_PREFIX = "openai"
"""Prefix that names the OpenAI-compatible path explicitly (``openai:gpt-4o-mini``)."""

TIMEOUT_VARIABLE = "CTXGRAPH_REQUEST_TIMEOUT"
"""Environment variable: seconds one model request may take before it fails."""

RETRIES_VARIABLE = "CTXGRAPH_MAX_RETRIES"
"""Environment variable: how often a failed model request is retried."""

DEFAULT_TIMEOUT = 120.0
"""Seconds one request to a remote model endpoint may take (each retry gets as long again)."""

DEFAULT_LOCAL_TIMEOUT = 600.0
"""Seconds one request to a local endpoint may take: a small model on a CPU can need
minutes for a summary or an extraction, and a request cut off is paid for in full."""

DEFAULT_MAX_RETRIES = 2
"""Retries of a failed request. Remote endpoints: after a failure to connect, a timeout or
HTTP 408/409/429/5xx. Local endpoints: only failures that come back at once (see
``local_retries``), never a timeout."""

STREAM_USAGE_VARIABLE = "CTXGRAPH_STREAM_USAGE"
"""Environment variable: ``0`` stops asking an OpenAI-compatible server for usage in streams."""

OFF_WORDS = frozenset({"0", "false", "no", "off"})
"""Values that turn a boolean environment variable off."""

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
        timeout: float | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> Models:
        """Build ``ChatOpenAI`` models for the three roles on one OpenAI-compatible endpoint.

        Args:
            model: The main model's name.
            summary_model: The summary model's name; None (or ``model``) uses the main one.
            memory_model: The memory model's name; None (or ``model``) uses the main one.
            base_url: The endpoint; None is OpenAI's (then ``api_key`` is required).
            api_key: The endpoint's key; a local server needs none.
            timeout: Seconds one request may take, for every role; None is 600 for a
                local ``base_url`` and 120 otherwise.
            max_retries: Retries of a failed request, for every role (on a local
                endpoint, only of failures that come back at once, never of a timeout).

        Returns:
            The models, sharing one endpoint, key and limits.

        Raises:
            ModelConfigError: Neither ``api_key`` nor ``base_url`` is given, or ``timeout``
                or ``max_retries`` is unusable.

        """
        if not api_key and not base_url:
            raise ModelConfigError(missing_key_message(None))
        if timeout is None:
            timeout = (
                DEFAULT_LOCAL_TIMEOUT if is_local_endpoint(base_url or "") else DEFAULT_TIMEOUT
            )
        if isinstance(timeout, bool) or not (
            isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0
        ):
            raise ModelConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ModelConfigError(f"max_retries must be a whole number >= 0, got {max_retries!r}")

        def make(name: str) -> BaseChatModel:
            return openai_chat_model(
                name, base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
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
                ``CTXGRAPH_SUMMARY_MODEL`` and ``CTXGRAPH_MEMORY_MODEL`` the other roles'.
                A bare name (``gpt-4o-mini``, ``qwen2.5:7b``) or ``openai:<name>`` is a
                model on the OpenAI-compatible endpoint of ``OPENAI_BASE_URL`` and
                ``OPENAI_API_KEY``; ``<provider>:<name>`` with a provider of ``PROVIDERS``
                (``anthropic:claude-sonnet-4-5``) is built by LangChain's
                ``init_chat_model`` and reads that provider's key variable;
                ``CTXGRAPH_REQUEST_TIMEOUT`` and ``CTXGRAPH_MAX_RETRIES`` set the limits.

        Returns:
            The configured models; nothing is contacted yet.

        Raises:
            ModelConfigError: ``CTXGRAPH_MODEL`` is not set, an OpenAI-compatible remote
                endpoint has no ``OPENAI_API_KEY``, a provider's package is not installed,
                or a limit is unusable; the message says what to set or install.

        """
        name = environ.get(ROLE_VARIABLES["main"], "").strip()
        if not name:
            raise ModelConfigError(ENVIRONMENT_HELP)
        if name == SCRIPTED_MODEL_NAME:
            # Imported here, not at the top, so that importing this module loads no demo code.
            from ctxgraph.state.demo_replies import demo_role_models

            main, summary, memory = demo_role_models()
            return cls(main=main, summary=summary, memory=memory)
        specs = _role_specs(environ, name)
        base_url = environ.get("OPENAI_BASE_URL", "").strip()
        api_key = environ.get("OPENAI_API_KEY", "").strip()
        openai_compatible = any(provider is None for provider, _ in specs.values())
        if openai_compatible and not api_key and not is_local_endpoint(base_url):
            raise ModelConfigError(missing_key_message(base_url or None))
        timeout, retries = request_limits(environ, local=is_local_endpoint(base_url))
        stream_usage = environ.get(STREAM_USAGE_VARIABLE, "").strip().lower() not in OFF_WORDS

        def make(role: str) -> BaseChatModel:
            provider, model = specs[role]
            if provider is None:
                return openai_chat_model(
                    model,
                    # Explicit, so the client does not fall back to variables outside ``environ``.
                    base_url=base_url or OPENAI_BASE_URL,
                    api_key=api_key or None,
                    timeout=timeout,
                    max_retries=retries,
                    stream_usage=stream_usage,
                )
            return provider_chat_model(
                role, provider, model, environ=environ, timeout=timeout, max_retries=retries
            )

        def other(role: str) -> BaseChatModel | None:
            if role not in specs or specs[role] == specs["main"]:
                return None
            return make(role)

        return cls(main=make("main"), summary=other("summary"), memory=other("memory"))


def _role_specs(environ: Mapping[str, str], main: str) -> dict[str, tuple[str | None, str]]:
    """Each configured role's ``(provider, model)``; ``main`` is the main model's name."""
    names = {
        role: environ.get(variable, "").strip() or None for role, variable in ROLE_VARIABLES.items()
    }
    names["main"] = main
    return {role: split_provider(value) for role, value in names.items() if value}


def split_provider(name: str) -> tuple[str | None, str]:
    """Split ``provider:model`` into its parts; None is the OpenAI-compatible path.

    Only a prefix of ``PROVIDERS`` (or ``openai``) counts as a provider, so that names with
    a colon of their own (``qwen2.5:7b``, ``llama3:70b``) stay bare model names.
    """
    prefix, colon, rest = name.partition(":")
    key = prefix.strip().lower().replace("-", "_")
    if not colon or not rest.strip():
        return None, name
    if key == OPENAI_PREFIX:
        return None, rest.strip()
    if key in PROVIDERS:
        return key, rest.strip()
    return None, name


def openai_chat_model(
    name: str,
    *,
    base_url: str | None,
    api_key: str | None,
    timeout: float,
    max_retries: int,
    stream_usage: bool = True,
) -> BaseChatModel:
    """A ``ChatOpenAI`` for ``name`` on an OpenAI-compatible endpoint (limits unchecked).

    Streamed answers ask for the server's usage (``stream_options.include_usage``, which
    llama.cpp, Ollama and vLLM report), so calibration and ``threads show --usage`` see
    the provider's counts; ``stream_usage=False`` is for a server that refuses the option.
    On a local endpoint, only failures that come back at once are retried, never a
    timeout (``local_retries``).
    """
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    options: dict[str, Any] = {"max_retries": max_retries}
    if is_local_endpoint(base_url or ""):
        from ctxgraph.state.local_retries import local_http_clients

        client, async_client = local_http_clients(max_retries)
        options = {"max_retries": 0, "http_client": client, "http_async_client": async_client}
    return ChatOpenAI(
        model=name,
        base_url=base_url,
        # Local OpenAI-compatible servers usually accept any key; the client insists on one.
        api_key=SecretStr(api_key or "not-needed"),
        timeout=float(timeout),
        stream_usage=stream_usage,
        **options,
    )


def provider_installed(module: str) -> bool:
    """Whether ``module`` (a provider's LangChain package) can be imported."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_package_message(variable: str, value: str, package: str) -> str:
    """The one-line error for a ``provider:model`` whose package is not installed."""
    return f"{variable}={value} needs the {package} package: pip install {package}"


def provider_chat_model(
    role: str,
    provider: str,
    model: str,
    *,
    environ: Mapping[str, str],
    timeout: float,
    max_retries: int,
) -> BaseChatModel:
    """Build ``provider``'s chat model for ``model`` with LangChain's ``init_chat_model``.

    Args:
        role: The role it is for (``main``, ``summary``, ``memory``), named in errors.
        provider: A key of ``PROVIDERS``.
        model: The model name without the prefix.
        environ: The environment; the provider's key variable is passed on from it.
        timeout: Seconds one request may take, for providers that take a timeout.
        max_retries: Retries of a failed request, for providers that take them.

    Returns:
        The chat model; nothing is contacted yet.

    Raises:
        ModelConfigError: The provider's package is not installed (the line names it), or
            the provider rejects the configuration; the message names the role's variable.

    """
    spec = PROVIDERS[provider]
    variable = ROLE_VARIABLES.get(role, role)
    value = f"{provider}:{model}"
    if not provider_installed(spec.module):
        raise ModelConfigError(missing_package_message(variable, value, spec.package))
    from langchain.chat_models import init_chat_model

    options: dict[str, Any] = {}
    if spec.limits:
        options.update(timeout=float(timeout), max_retries=max_retries)
    key = environ.get(spec.key_variable, "").strip() if spec.key_variable else ""
    if key:
        options["api_key"] = key
    try:
        built = init_chat_model(model, model_provider=provider, **options)
    except ImportError as error:
        raise ModelConfigError(
            f"{missing_package_message(variable, value, spec.package)} ({error})"
        ) from error
    except (ValueError, TypeError) as error:
        cause = " ".join(str(error).split())
        raise ModelConfigError(f"{variable}={value} cannot be built: {cause}") from error
    if not isinstance(built, BaseChatModel):
        raise ModelConfigError(f"{variable}={value} did not build a chat model, got {built!r}")
    return built


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


def request_limits(environ: Mapping[str, str], *, local: bool = False) -> tuple[float, int]:
    """``CTXGRAPH_REQUEST_TIMEOUT`` (seconds) and ``CTXGRAPH_MAX_RETRIES`` (default 2).

    The timeout defaults to 120 s, or to 600 s for a ``local`` endpoint. Raises
    ``ModelConfigError`` naming the variable and its value when either is unusable.
    """
    timeout = DEFAULT_LOCAL_TIMEOUT if local else DEFAULT_TIMEOUT
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
