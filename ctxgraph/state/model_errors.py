"""Turns a failed call to a model endpoint into one line: role, model, endpoint and cause."""

from __future__ import annotations

import json
import os
import socket
import ssl
import traceback
from collections.abc import Iterator
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

ROLES = ("main", "summary", "memory", "embedding")
"""The model roles a failure can be reported for."""

DEBUG_VARIABLE = "CTXGRAPH_DEBUG"
"""Environment variable that, set to 1, adds the traceback to a one-line error."""

_API_PATHS = ("/chat/completions", "/embeddings", "/completions", "/messages")

_API_ERROR_NAMES = frozenset(
    {"APIError", "APIStatusError", "APIConnectionError", "APITimeoutError"}
)
"""Class names of the errors that OpenAI-style SDKs (openai, anthropic, ...) raise."""

_STATUS_ERROR_NAMES = frozenset(
    {
        "AuthenticationError",
        "PermissionDeniedError",
        "NotFoundError",
        "RateLimitError",
        "BadRequestError",
        "ConflictError",
        "UnprocessableEntityError",
        "InternalServerError",
        "OverloadedError",
        "ServiceUnavailableError",
        "HTTPStatusError",
    }
)
"""Class names of HTTP status errors; they count when they carry a ``status_code``."""

_TIMEOUT_NAMES = frozenset(
    {"APITimeoutError", "TimeoutException", "ConnectTimeout", "ReadTimeout", "WriteTimeout"}
)
_CONNECTION_NAMES = frozenset(
    {"APIConnectionError", "TransportError", "NetworkError", "ConnectError", "RemoteProtocolError"}
)

_REFUSED = "connection refused (is the server running and listening on that port?)"
_DNS_WORDS = (
    "name or service not known",
    "nodename nor servname",
    "temporary failure in name resolution",
)
"""What a failed host name lookup says, in the words of the platforms' resolvers."""
_TLS_WORDS = ("ssl", "certificate", "tls")

_KEY_VARIABLES = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "groq": "GROQ_API_KEY",
    "mistralai": "MISTRAL_API_KEY",
}
"""The API key variable to check, by the top-level module of the error's class."""


class ModelEndpointError(RuntimeError):
    """A model endpoint could not answer; ``str()`` is the one line shown to the user."""

    def __init__(self, role: str, model: str | None, endpoint: str | None, cause: str) -> None:
        self.role = role
        self.model = model
        self.endpoint = endpoint
        self.cause = cause
        super().__init__(describe_parts(role, model, endpoint, cause))


def describe_parts(role: str, model: str | None, endpoint: str | None, cause: str) -> str:
    """``<role> model '<name>' at <endpoint>: <cause>`` with the parts that are known."""
    who = f"{role} model" + (f" {model!r}" if model else "")
    where = f" at {endpoint}" if endpoint else ""
    return f"{who}{where}: {cause}"


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the errors it was raised from, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _class_names(error: BaseException) -> set[str]:
    return {klass.__name__ for klass in type(error).__mro__}


def _status_code(error: BaseException) -> int | None:
    """The HTTP status of ``error`` (its ``status_code``, else its response's)."""
    for holder in (error, getattr(error, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def _is_httpx_error(error: BaseException) -> bool:
    """Whether ``error`` is an ``httpx`` (or ``httpx2``) transport or HTTP status error."""
    library = type(error).__module__.split(".", 1)[0]
    if not library.startswith("httpx"):
        return False
    return bool(_class_names(error) & {"TransportError", "HTTPStatusError"})


def _is_api_error(error: BaseException) -> bool:
    """Whether ``error`` is a client library's endpoint failure, recognised by its class.

    ``openai.APIError`` and its kin are matched by name, so that other SDKs shaped like
    it (``anthropic``) are recognised without importing them; so are ``httpx`` errors.
    """
    names = _class_names(error)
    if names & _API_ERROR_NAMES or _is_httpx_error(error):
        return True
    return bool(names & _STATUS_ERROR_NAMES) and _status_code(error) is not None


def _api_error(error: BaseException) -> Any | None:
    """The client library's endpoint error in the chain of ``error``, if any."""
    for link in _chain(error):
        if _is_api_error(link):
            return link
    return None


def is_endpoint_error(error: BaseException) -> bool:
    """Whether ``error`` is a model endpoint failing (connection, HTTP status, timeout)."""
    return isinstance(error, ModelEndpointError) or _api_error(error) is not None


def _attribute(holder: Any, name: str) -> Any | None:
    """``holder.name``, or None when it is missing or unset (httpx raises RuntimeError)."""
    try:
        return getattr(holder, name, None)
    except RuntimeError:
        return None


def _request(error: BaseException) -> Any | None:
    """The HTTP request that failed, from ``error`` or its response."""
    request = _attribute(error, "request")
    if request is None:
        request = _attribute(_attribute(error, "response"), "request")
    return request


def safe_endpoint(url: str) -> str:
    """``url`` without credentials, query, fragment and the API path (``/chat/completions``)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host + (f":{port}" if port else "")
    path = parts.path
    for suffix in _API_PATHS:
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return urlunsplit((parts.scheme, netloc, path.rstrip("/"), "", ""))


def _request_model(request: Any) -> str | None:
    """The ``model`` field of a JSON request body, if it can be read."""
    try:
        body = json.loads(request.content or b"{}")
    except (ValueError, TypeError, AttributeError, RuntimeError):
        return None
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None


def _timeout_seconds(request: Any) -> float | None:
    timeout = getattr(request, "extensions", {}).get("timeout")
    if isinstance(timeout, dict):
        read = timeout.get("read")
        if isinstance(read, int | float):
            return float(read)
    return None


def _body_message(body: Any) -> str:
    """The ``error.message`` (or ``message``) of an error body, if it has one."""
    if not isinstance(body, dict):
        return ""
    inner = body.get("error", body)
    message = inner.get("message") if isinstance(inner, dict) else inner
    return _one_line(message) if isinstance(message, str) and message.strip() else ""


def _server_message(api_error: Any) -> str:
    """The ``error.message`` of an OpenAI- or Anthropic-style error body, else the text."""
    message = _body_message(getattr(api_error, "body", None))
    if message:
        return message
    response = _attribute(api_error, "response")
    text = _attribute(response, "text") if response is not None else ""
    if not isinstance(text, str):
        return ""
    try:
        message = _body_message(json.loads(text))
    except ValueError:
        message = ""
    return message or _one_line(text)


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _connection_cause(error: BaseException) -> str:
    """Name why a connection failed: refused, DNS, TLS, reset, or the library's words."""
    words = ""
    for link in _chain(error):
        text = str(link)
        cause = _typed_cause(link) or _worded_cause(text)
        if cause:
            return cause
        if not words and text and text != "Connection error.":
            words = _one_line(text)
    return f"connection failed ({words or type(error).__name__})"


def _typed_cause(link: BaseException) -> str:
    """The cause an error's type names (refused, DNS, TLS); empty for another type."""
    if isinstance(link, ConnectionRefusedError):
        return _REFUSED
    if isinstance(link, socket.gaierror):
        return f"cannot resolve the host name (DNS: {link.strerror or link})"
    if isinstance(link, ssl.SSLError):
        return f"TLS handshake failed ({_one_line(str(link))})"
    return ""


def _worded_cause(text: str) -> str:
    """The cause an error's text names (refused, DNS, TLS); empty when it names none."""
    lowered = text.lower()
    if "connection refused" in lowered:
        return _REFUSED
    if any(words in lowered for words in _DNS_WORDS):
        return f"cannot resolve the host name (DNS: {_one_line(text)})"
    if any(word in lowered for word in _TLS_WORDS):
        return f"TLS handshake failed ({_one_line(text)})"
    return ""


def _key_variable(api_error: Any) -> str:
    """The API key variable the library of ``api_error`` reads, or a generic phrase."""
    library = type(api_error).__module__.split(".", 1)[0]
    return _KEY_VARIABLES.get(library, "the provider's API key")


def _status_cause(status: int, api_error: Any) -> str:
    message = _server_message(api_error)
    detail = f": {message}" if message else ""
    key = _key_variable(api_error)
    if status == 401:
        return f"authentication failed (HTTP 401{detail}); check {key}"
    if status == 403:
        return f"access denied (HTTP 403{detail}); check {key} and its permissions"
    if status == 404:
        if key == "OPENAI_API_KEY":
            return (
                f"not found (HTTP 404{detail}); check the model name and OPENAI_BASE_URL "
                "(it usually ends in /v1)"
            )
        return f"not found (HTTP 404{detail}); check the model name"
    if status == 429:
        return f"rate limited or out of quota (HTTP 429{detail}); try again later"
    if status >= 500:
        return f"server error (HTTP {status}{detail})"
    return f"request rejected (HTTP {status}{detail})"


def describe_cause(error: BaseException) -> str:
    """One line saying why the endpoint failed, naming the HTTP status where there is one."""
    api_error = _api_error(error)
    if api_error is None:
        return _one_line(f"{type(error).__name__}: {error}")
    names = _class_names(api_error)
    if names & _TIMEOUT_NAMES:
        seconds = _timeout_seconds(_request(api_error))
        after = f"within {seconds:g} s " if seconds is not None else ""
        return f"timed out: no answer {after}(CTXGRAPH_REQUEST_TIMEOUT)"
    if names & _CONNECTION_NAMES:
        return _connection_cause(api_error)
    status = _status_code(api_error)
    if status is not None:
        return _status_cause(status, api_error)
    return _one_line(f"{type(api_error).__name__}: {api_error}")


def endpoint_error(
    error: BaseException, role: str, *, model: str | None = None, endpoint: str | None = None
) -> ModelEndpointError:
    """Describe ``error`` as a ``ModelEndpointError`` of ``role``.

    The endpoint and model are read from the failed request when it is known; a request
    to ``/embeddings`` is reported as the embedding model's whatever ``role`` says.
    """
    if isinstance(error, ModelEndpointError):
        return error
    api_error = _api_error(error)
    request = _request(api_error) if api_error is not None else None
    if request is not None:
        url = str(getattr(request, "url", ""))
        if url:
            if urlsplit(url).path.endswith("/embeddings"):
                role = "embedding"
            endpoint = safe_endpoint(url)
        model = _request_model(request) or model
    return ModelEndpointError(role, model, endpoint, describe_cause(error))


def endpoint_warning(error: BaseException, role: str, model: Any = None) -> str:
    """The one-line warning for a failed call whose failure does not fail the turn."""
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    base = getattr(model, "openai_api_base", None) or getattr(model, "anthropic_api_url", None)
    return str(
        endpoint_error(
            error,
            role,
            model=name if isinstance(name, str) else None,
            endpoint=safe_endpoint(base) if isinstance(base, str) and base else None,
        )
    )


def debug_enabled() -> bool:
    """Whether ``CTXGRAPH_DEBUG`` asks for tracebacks (1, true, yes or on)."""
    return os.environ.get(DEBUG_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def report_endpoint_error(error: BaseException, err: TextIO, *, role: str = "main") -> bool:
    """Print ``ctxgraph: <one line>`` to ``err`` if ``error`` is a model endpoint failure.

    With ``CTXGRAPH_DEBUG=1`` (or ``ctxgraph --debug``) the traceback comes first. Returns
    False, printing nothing, for any other error, which the caller should re-raise.
    """
    if not is_endpoint_error(error):
        return False
    if debug_enabled():
        traceback.print_exception(error, file=err)
    err.write(f"ctxgraph: {endpoint_error(error, role)}\n")
    err.flush()
    return True
