"""Retries that suit a model served on this machine: quick failures again, a slow answer never.

The OpenAI client retries every failure alike, a timeout included: a local CPU model that
needs 150 s for an answer, under a 120 s timeout, is asked three times and costs over
six minutes before the turn fails. A local server's failures are of two kinds. Some come
back at once (the server is not up yet, it is loading the model: connection refused, HTTP
502/503/504, or busy: 429): asking again shortly is right. A timeout means the model is
slow, and asking again only repeats the wait. So for local endpoints the client itself
does not retry, and an ``httpx`` transport retries the quick failures only
(``RetryRule``); the sync and async transports run one flow (``_retried``) and differ
only in how they send, close and wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import httpx

from ctxgraph.state.sans_io import Flow, Io, arun, run

T = TypeVar("T")

RETRY_STATUSES = frozenset({429, 502, 503, 504})
"""Answers a local server gives at once while it starts, loads a model or is busy."""


@dataclass(frozen=True)
class RetryRule:
    """When a request to a local endpoint is sent again, and after how long.

    Args:
        retries: How many times a request may be sent again (0: never).
        first_delay: Seconds before the first retry; each next one waits twice as long.
        max_delay: The longest wait between two tries.

    """

    retries: int
    first_delay: float = 0.5
    max_delay: float = 8.0

    def delay(
        self, attempt: int, *, status: int | None = None, error: Exception | None = None
    ) -> float | None:
        """Seconds to wait before sending again after try number ``attempt`` (0-based).

        None when the request must not be sent again: the retries are used up, the
        answer is not a quick failure, or the error is a timeout of a request that
        reached the server (only a connection that could not be made is tried again).
        """
        if attempt >= self.retries:
            return None
        if error is not None and not isinstance(error, httpx.ConnectError | httpx.ConnectTimeout):
            return None
        if error is None and status not in RETRY_STATUSES:
            return None
        return float(min(self.first_delay * 2.0**attempt, self.max_delay))


def _retried(
    rule: RetryRule,
    send: Callable[[], Io[httpx.Response]],
    close: Callable[[httpx.Response], Io[None]],
) -> Flow[httpx.Response]:
    """Send, again after a quick failure while ``rule`` allows it, waiting in between."""
    attempt = 0
    while True:
        try:
            response: httpx.Response = yield send()
        except httpx.TransportError as error:
            wait = rule.delay(attempt, error=error)
            if wait is None:
                raise
        else:
            wait = rule.delay(attempt, status=response.status_code)
            if wait is None:
                return response
            yield close(response)
        yield Io(partial(time.sleep, wait), partial(asyncio.sleep, wait))
        attempt += 1


def _sync_only(call: Callable[[], T]) -> Io[T]:
    """An I/O call the sync transport makes (its flow never runs with ``arun``)."""

    async def never() -> T:
        raise TypeError("the sync transport's requests are sent by the sync driver")

    return Io(call, never)


def _async_only(acall: Callable[[], Awaitable[T]]) -> Io[T]:
    """An I/O call the async transport makes (its flow never runs with ``run``)."""

    def never() -> T:
        raise TypeError("the async transport's requests are sent by the async driver")

    return Io(never, acall)


class LocalRetryTransport(httpx.BaseTransport):
    """A synchronous transport that applies ``RetryRule`` around another transport."""

    def __init__(self, rule: RetryRule, inner: httpx.BaseTransport | None = None) -> None:
        """Send with ``inner`` (a default ``httpx.HTTPTransport``), retrying by ``rule``."""
        self._rule = rule
        self._inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, again after a quick failure while ``rule`` allows it."""
        send = partial(self._inner.handle_request, request)
        return run(_retried(self._rule, lambda: _sync_only(send), lambda r: _sync_only(r.close)))

    def close(self) -> None:
        """Close the inner transport."""
        self._inner.close()


class AsyncLocalRetryTransport(httpx.AsyncBaseTransport):
    """The asynchronous :class:`LocalRetryTransport`."""

    def __init__(self, rule: RetryRule, inner: httpx.AsyncBaseTransport | None = None) -> None:
        """Send with ``inner`` (a default ``httpx.AsyncHTTPTransport``), retrying by ``rule``."""
        self._rule = rule
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, again after a quick failure while ``rule`` allows it."""
        send = partial(self._inner.handle_async_request, request)
        flow = _retried(self._rule, lambda: _async_only(send), lambda r: _async_only(r.aclose))
        return await arun(flow)

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self._inner.aclose()


def local_http_clients(retries: int) -> tuple[httpx.Client, httpx.AsyncClient]:
    """The sync and async ``httpx`` clients of a local endpoint's chat model.

    Args:
        retries: How many times a quick failure is retried (``CTXGRAPH_MAX_RETRIES``).

    Returns:
        Clients whose transports retry by :class:`RetryRule`; the OpenAI client that uses
        them is built with ``max_retries=0`` and keeps its own per-request timeout.

    """
    rule = RetryRule(retries)
    return (
        httpx.Client(transport=LocalRetryTransport(rule)),
        httpx.AsyncClient(transport=AsyncLocalRetryTransport(rule)),
    )
