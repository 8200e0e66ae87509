"""Any provider from the environment: ``provider:model`` names and their one-line errors."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import httpx
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_openai import ChatOpenAI

from ctxgraph.state.model_errors import (
    endpoint_error,
    endpoint_warning,
    is_endpoint_error,
)
from ctxgraph.state.models import ModelConfigError, Models, split_provider

LOCAL = "http://127.0.0.1:9/v1"
ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"


def env(**values: str) -> dict[str, str]:
    return dict(values)


# --- names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gpt-4o-mini", (None, "gpt-4o-mini")),
        ("openai:gpt-4o-mini", (None, "gpt-4o-mini")),
        ("anthropic:claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5")),
        ("Anthropic:claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5")),
        ("ollama:qwen2.5:7b", ("ollama", "qwen2.5:7b")),
        ("google-genai:gemini-2.5-pro", ("google_genai", "gemini-2.5-pro")),
        # Ollama-style names whose prefix is no provider stay bare model names.
        ("qwen2.5:7b", (None, "qwen2.5:7b")),
        ("llama3:70b", (None, "llama3:70b")),
        ("deepseek-r1:14b", (None, "deepseek-r1:14b")),
        ("anthropic:", (None, "anthropic:")),
    ],
)
def test_only_known_prefixes_are_providers(name: str, expected: tuple[str | None, str]) -> None:
    assert split_provider(name) == expected


# --- building ------------------------------------------------------------------------


def test_openai_prefix_builds_chat_openai_with_the_bare_name() -> None:
    models = Models.from_env(env(CTXGRAPH_MODEL="openai:gpt-4o-mini", OPENAI_API_KEY="sk-test"))
    assert isinstance(models.main, ChatOpenAI)
    assert models.main.model_name == "gpt-4o-mini"
    assert models.summary is None
    assert models.memory is None


def test_openai_prefix_still_needs_a_key_for_a_remote_endpoint() -> None:
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY is not set"):
        Models.from_env(env(CTXGRAPH_MODEL="openai:gpt-4o-mini"))


def test_a_colon_name_without_a_provider_prefix_stays_openai_compatible() -> None:
    models = Models.from_env(env(CTXGRAPH_MODEL="qwen2.5:7b", OPENAI_BASE_URL=LOCAL))
    assert isinstance(models.main, ChatOpenAI)
    assert models.main.model_name == "qwen2.5:7b"
    assert models.main.openai_api_base == LOCAL


def test_anthropic_builds_chat_anthropic_without_an_openai_key() -> None:
    models = Models.from_env(
        env(
            CTXGRAPH_MODEL="anthropic:claude-sonnet-4-5",
            ANTHROPIC_API_KEY="sk-ant-test",
            CTXGRAPH_REQUEST_TIMEOUT="7",
            CTXGRAPH_MAX_RETRIES="4",
        )
    )
    main = models.main
    assert isinstance(main, ChatAnthropic)
    assert main.model == "claude-sonnet-4-5"
    assert main.anthropic_api_key.get_secret_value() == "sk-ant-test"
    assert main.default_request_timeout == 7.0
    assert main.max_retries == 4
    assert models.summary is None
    assert models.memory is None


def test_role_variables_take_provider_names_too() -> None:
    models = Models.from_env(
        env(
            CTXGRAPH_MODEL="gpt-4o-mini",
            OPENAI_BASE_URL=LOCAL,
            CTXGRAPH_SUMMARY_MODEL="anthropic:claude-haiku-4-5",
            CTXGRAPH_MEMORY_MODEL="openai:gpt-4.1-nano",
        )
    )
    assert isinstance(models.main, ChatOpenAI)
    assert models.main.model_name == "gpt-4o-mini"
    assert isinstance(models.summary, ChatAnthropic)
    assert models.summary.model == "claude-haiku-4-5"
    assert isinstance(models.memory, ChatOpenAI)
    assert models.memory.model_name == "gpt-4.1-nano"
    assert models.memory.openai_api_base == LOCAL


def test_a_role_naming_the_main_model_shares_it() -> None:
    models = Models.from_env(
        env(
            CTXGRAPH_MODEL="anthropic:claude-sonnet-4-5",
            CTXGRAPH_SUMMARY_MODEL="anthropic:claude-sonnet-4-5",
        )
    )
    assert models.summary is None
    assert models.summary_model is models.main


def test_a_bare_role_next_to_a_provider_main_needs_the_openai_key() -> None:
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY is not set"):
        Models.from_env(
            env(CTXGRAPH_MODEL="anthropic:claude-sonnet-4-5", CTXGRAPH_MEMORY_MODEL="gpt-4o-mini")
        )


def test_a_missing_provider_package_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_anthropic", None)  # as if not installed
    with pytest.raises(ModelConfigError) as caught:
        Models.from_env(env(CTXGRAPH_MODEL="anthropic:claude-sonnet-4-5"))
    assert str(caught.value) == (
        "CTXGRAPH_MODEL=anthropic:claude-sonnet-4-5 needs the langchain-anthropic package: "
        "pip install langchain-anthropic"
    )


def test_a_missing_package_of_a_role_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_ollama", None)
    with pytest.raises(ModelConfigError) as caught:
        Models.from_env(
            env(
                CTXGRAPH_MODEL="gpt-4o-mini",
                OPENAI_BASE_URL=LOCAL,
                CTXGRAPH_SUMMARY_MODEL="ollama:qwen2.5:7b",
            )
        )
    assert str(caught.value) == (
        "CTXGRAPH_SUMMARY_MODEL=ollama:qwen2.5:7b needs the langchain-ollama package: "
        "pip install langchain-ollama"
    )
    assert "\n" not in str(caught.value)


def test_scripted_still_means_the_demo_model() -> None:
    models = Models.from_env(env(CTXGRAPH_MODEL="scripted"))
    assert not isinstance(models.main, ChatOpenAI | ChatAnthropic)


# --- errors ----------------------------------------------------------------------------


def _request(url: str = ANTHROPIC_URL, model: str = "claude-sonnet-4-5") -> httpx.Request:
    return httpx.Request("POST", url, json={"model": model, "max_tokens": 10})


def _response(status: int, message: str, request: httpx.Request | None = None) -> httpx.Response:
    body = {"type": "error", "error": {"type": "some_error", "message": message}}
    return httpx.Response(status, request=request or _request(), json=body)


# Classes shaped like the anthropic SDK's, in a module of that name, without importing it.
class AnthropicError(Exception):
    pass


class APIError(AnthropicError):
    def __init__(self, message: str, request: httpx.Request, *, body: Any = None) -> None:
        super().__init__(message)
        self.request = request
        self.body = body


class APIStatusError(APIError):
    def __init__(self, message: str, *, response: httpx.Response, body: Any) -> None:
        super().__init__(message, response.request, body=body)
        self.response = response
        self.status_code = response.status_code


class AuthenticationError(APIStatusError):
    pass


class RateLimitError(APIStatusError):
    pass


class InternalServerError(APIStatusError):
    pass


class APIConnectionError(APIError):
    def __init__(self, *, message: str = "Connection error.", request: httpx.Request) -> None:
        super().__init__(message, request)


class APITimeoutError(APIConnectionError):
    def __init__(self, request: httpx.Request) -> None:
        super().__init__(message="Request timed out.", request=request)


for _fake in (
    AnthropicError,
    APIError,
    APIStatusError,
    AuthenticationError,
    RateLimitError,
    InternalServerError,
    APIConnectionError,
    APITimeoutError,
):
    _fake.__module__ = "anthropic._exceptions"


def _status(cls: type[APIStatusError], status: int, message: str) -> APIStatusError:
    response = _response(status, message)
    return cls(f"Error code: {status}", response=response, body=response.json())


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (
            _status(AuthenticationError, 401, "invalid x-api-key"),
            "authentication failed (HTTP 401: invalid x-api-key); check ANTHROPIC_API_KEY",
        ),
        (
            _status(RateLimitError, 429, "Number of requests has exceeded your rate limit"),
            "rate limited or out of quota (HTTP 429: Number of requests has exceeded your "
            "rate limit); try again later",
        ),
        (
            _status(InternalServerError, 529, "Overloaded"),
            "server error (HTTP 529: Overloaded)",
        ),
        (
            _status(APIStatusError, 404, "model: claude-nope"),
            "not found (HTTP 404: model: claude-nope); check the model name",
        ),
        (
            APITimeoutError(_request()),
            "timed out: no answer (CTXGRAPH_REQUEST_TIMEOUT)",
        ),
    ],
)
@pytest.mark.parametrize("role", ["main", "summary", "memory"])
def test_anthropic_shaped_errors_name_role_model_and_cause(
    error: BaseException, cause: str, role: str
) -> None:
    assert is_endpoint_error(error)
    line = str(endpoint_error(error, role))
    assert line == f"{role} model 'claude-sonnet-4-5' at https://api.anthropic.com/v1: {cause}"


def test_an_anthropic_connection_error_names_the_refusal() -> None:
    request = _request()
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError as low:
            raise APIConnectionError(request=request) from low
    except APIConnectionError as error:
        line = str(endpoint_error(error, "memory"))
    assert line == (
        "memory model 'claude-sonnet-4-5' at https://api.anthropic.com/v1: "
        "connection refused (is the server running and listening on that port?)"
    )


def test_the_real_anthropic_errors_are_recognised() -> None:
    import anthropic
    import anthropic._exceptions as sdk_errors

    # The SDK's own HTTP library (httpx2 in this release, httpx in older ones).
    client_http: Any = getattr(sdk_errors, "httpx2", None) or httpx
    request = client_http.Request("POST", ANTHROPIC_URL, json={"model": "claude-sonnet-4-5"})
    body = {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}
    response = client_http.Response(401, request=request, json=body)
    error = anthropic.AuthenticationError("bad key", response=response, body=body)
    assert str(endpoint_error(error, "summary")) == (
        "summary model 'claude-sonnet-4-5' at https://api.anthropic.com/v1: "
        "authentication failed (HTTP 401: bad key); check ANTHROPIC_API_KEY"
    )
    timeout = anthropic.APITimeoutError(request=request)
    assert str(endpoint_error(timeout, "main")).endswith(
        ": timed out: no answer (CTXGRAPH_REQUEST_TIMEOUT)"
    )
    limited = anthropic.RateLimitError(
        "slow down", response=client_http.Response(429, request=request), body=None
    )
    assert "rate limited or out of quota (HTTP 429" in str(endpoint_error(limited, "memory"))


def test_errors_of_the_sdk_http_library_are_recognised() -> None:
    client_http = pytest.importorskip("httpx2")
    request = client_http.Request("POST", HTTPX_URL, json={"model": "mixtral"})
    refused = client_http.ConnectError("[Errno 111] Connection refused", request=request)
    assert str(endpoint_error(refused, "main")) == (
        "main model 'mixtral' at https://llm.example.test/v1/chat: "
        "connection refused (is the server running and listening on that port?)"
    )
    slow = client_http.ReadTimeout("timed out", request=request)
    assert "timed out: no answer" in str(endpoint_error(slow, "main"))


def test_an_error_raised_from_a_provider_error_is_still_one() -> None:
    try:
        try:
            raise _status(AuthenticationError, 401, "invalid x-api-key")
        except AuthenticationError as inner:
            raise RuntimeError("the model call failed") from inner
    except RuntimeError as error:
        assert is_endpoint_error(error)
        assert "authentication failed (HTTP 401" in str(endpoint_error(error, "main"))


HTTPX_URL = "https://llm.example.test/v1/chat"


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (
            httpx.HTTPStatusError(
                "Client error '403 Forbidden'",
                request=_request(HTTPX_URL, "mixtral"),
                response=_response(403, "no access", _request(HTTPX_URL, "mixtral")),
            ),
            "access denied (HTTP 403: no access); check the provider's API key and its permissions",
        ),
        (
            httpx.HTTPStatusError(
                "Server error '503'",
                request=_request(HTTPX_URL, "mixtral"),
                response=httpx.Response(503, text="upstream down"),
            ),
            "server error (HTTP 503: upstream down)",
        ),
        (
            httpx.ConnectError(
                "[Errno 111] Connection refused", request=_request(HTTPX_URL, "mixtral")
            ),
            "connection refused (is the server running and listening on that port?)",
        ),
        (
            httpx.ReadTimeout("timed out", request=_request(HTTPX_URL, "mixtral")),
            "timed out: no answer (CTXGRAPH_REQUEST_TIMEOUT)",
        ),
    ],
)
def test_httpx_errors_name_role_model_and_cause(error: BaseException, cause: str) -> None:
    assert is_endpoint_error(error)
    line = str(endpoint_error(error, "memory", model="mixtral"))
    assert line.startswith("memory model 'mixtral'")
    assert line.endswith(f": {cause}")


def test_an_httpx_error_without_a_request_still_gives_a_line() -> None:
    error = httpx.ConnectTimeout("timed out")  # .request is unset and raises when read
    assert str(endpoint_error(error, "summary", model="m")) == (
        "summary model 'm': timed out: no answer (CTXGRAPH_REQUEST_TIMEOUT)"
    )


def test_other_errors_are_not_endpoint_errors() -> None:
    class NotFoundError(Exception):  # a name shared with SDKs, but no HTTP status
        pass

    assert not is_endpoint_error(ValueError("bad"))
    assert not is_endpoint_error(NotFoundError("no such file"))


def test_a_warning_names_a_chat_anthropic_model_and_endpoint() -> None:
    model = ChatAnthropic(model_name="claude-haiku-4-5", timeout=None, stop=None)
    error = APITimeoutError(httpx.Request("POST", "https://proxy.example.test/v1/messages"))
    line = endpoint_warning(error, "summary", model)
    assert line == (
        "summary model 'claude-haiku-4-5' at https://proxy.example.test/v1: "
        "timed out: no answer (CTXGRAPH_REQUEST_TIMEOUT)"
    )


def test_classifying_errors_does_not_import_anthropic() -> None:
    code = (
        "import sys, httpx\n"
        "from ctxgraph.state.model_errors import endpoint_error\n"
        "endpoint_error(httpx.ConnectError('refused'), 'main')\n"
        "assert 'anthropic' not in sys.modules, 'anthropic imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
