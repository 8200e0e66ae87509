"""Sans-I/O flows: the logic is written once and yields its I/O, a sync or an async driver does it.

A flow is a generator. Each I/O call it needs is yielded as an :class:`Io`, which holds the
call in its two forms (``store.get`` and ``store.aget``, ``forget_thread`` and
``aforget_thread``); ``run`` makes the sync call and ``arun`` awaits the async one, and each
sends the result back (or throws the error in, so the flow's ``try`` blocks see it as they
would a direct call). The sync and async entry points are then one line each::

    def _rename(store: BaseStore, key: str, new: str) -> Flow[bool]:
        item = yield from io(store.get, store.aget, NAMESPACE, key)
        if item is None:
            return False
        yield from io(store.put, store.aput, NAMESPACE, new, item.value)
        return True


    def rename(store: BaseStore, key: str, new: str) -> bool:
        return run(_rename(store, key, new))


    async def arename(store: BaseStore, key: str, new: str) -> bool:
        return await arun(_rename(store, key, new))
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, ParamSpec, TypeVar, cast

__all__ = ["Flow", "Io", "arun", "held", "io", "run", "threaded"]

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Io(Generic[T]):
    """One I/O call in its two forms: ``call`` for the sync driver, ``acall`` for the async one."""

    call: Callable[[], T]
    acall: Callable[[], Awaitable[T]]


Flow = Generator[Io[Any], Any, T]
"""Yields the I/O it needs, is sent each result, returns a ``T``."""


def io(
    call: Callable[P, T], acall: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs
) -> Flow[T]:
    """Yield one I/O call (``call`` or ``acall`` with these arguments) and return its result."""
    result = yield Io(partial(call, *args, **kwargs), partial(acall, *args, **kwargs))
    return cast(T, result)


def threaded(call: Callable[P, T]) -> Callable[P, Awaitable[T]]:
    """``call`` as the async form of itself run in a worker thread (off the event loop)."""

    async def acall(*args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(call, *args, **kwargs)

    return acall


def held(
    enter: Callable[[], AbstractContextManager[Any]],
    aenter: Callable[[], AbstractAsyncContextManager[Any]],
    flow: Flow[T],
) -> Flow[T]:
    """Run ``flow`` inside a context manager (a lock): ``enter()`` or ``aenter()``."""

    def call() -> T:
        with enter():
            return run(flow)

    async def acall() -> T:
        async with aenter():
            return await arun(flow)

    return cast(T, (yield Io(call, acall)))


@dataclass(frozen=True, slots=True)
class _Done(Generic[T]):
    value: T


def _advance(
    flow: Flow[T], result: Any = None, error: BaseException | None = None
) -> Io[Any] | _Done[T]:
    """Send the flow a result (or throw it an error); its next call, or what it returned."""
    try:
        return flow.send(result) if error is None else flow.throw(error)
    except StopIteration as done:
        return _Done(cast(T, done.value))


def _outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return call(), None
    except BaseException as error:  # handed to the flow, which re-raises what it keeps
        return None, error


def run(flow: Flow[T]) -> T:
    """Drive ``flow`` with the sync form of each call."""
    step = _advance(flow)
    while isinstance(step, Io):
        step = _advance(flow, *_outcome(step.call))
    return step.value


async def arun(flow: Flow[T]) -> T:
    """Drive ``flow`` with the async form of each call."""
    step = _advance(flow)
    while isinstance(step, Io):
        try:
            outcome: tuple[Any, BaseException | None] = (await step.acall(), None)
        except BaseException as error:  # handed to the flow, which re-raises what it keeps
            outcome = (None, error)
        step = _advance(flow, *outcome)
    return step.value
