"""Sans-I/O plans of the memory repository, run by a sync or an async driver.

A plan is a generator that yields each Store (or index, or embedder) call as a ``Call``, a
pair of the same call's sync and async forms, receives its result (or has its exception
thrown in) and finally returns its answer. ``drive`` runs a plan with the sync forms and
``adrive`` with the async ones, so a method and its ``a``-prefixed twin share every
decision and differ only in the I/O (as ``store/artifacts/flows.py`` does with batches).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, ParamSpec, TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


@dataclass(frozen=True)
class Call(Generic[R]):
    """One I/O call of a plan, in its sync and its async form."""

    sync: Callable[[], R]
    """Makes the call and returns its result."""
    aio: Callable[[], Awaitable[R]]
    """Makes the same call on the async API."""


Plan = Generator[Call[Any], Any, T]
"""Yields calls, is sent each call's result, returns a ``T``."""


def call(
    sync: Callable[P, R], aio: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs
) -> Call[R]:
    """The call of ``sync`` or ``aio`` (its async twin) with the same arguments."""
    return Call(partial(sync, *args, **kwargs), partial(aio, *args, **kwargs))


class _Run(Generic[T]):
    """A plan under way: the call it waits on (None once done) and its answer."""

    def __init__(self, plan: Plan[T]) -> None:
        self.plan = plan
        self.answer: T | None = None
        self.call: Call[Any] | None = self._advance(partial(next, plan))

    def _advance(self, step: Callable[[], Call[Any]]) -> Call[Any] | None:
        try:
            return step()
        except StopIteration as done:
            self.answer = done.value
            return None

    def resume(self, outcome: tuple[Any, Exception | None]) -> None:
        """Send the call's result into the plan, or throw its exception in."""
        result, error = outcome
        if error is None:
            self.call = self._advance(partial(self.plan.send, result))
        else:
            self.call = self._advance(partial(self.plan.throw, error))


def _outcome(make: Callable[[], R]) -> tuple[R | None, Exception | None]:
    try:
        return make(), None
    except Exception as error:
        return None, error


async def _aoutcome(make: Callable[[], Awaitable[R]]) -> tuple[R | None, Exception | None]:
    try:
        return await make(), None
    except Exception as error:
        return None, error


def drive(plan: Plan[T]) -> T:
    """Run ``plan`` with the sync form of each call; a call's exception goes into the plan."""
    run = _Run(plan)
    while run.call is not None:
        run.resume(_outcome(run.call.sync))
    return cast(T, run.answer)


async def adrive(plan: Plan[T]) -> T:
    """Run ``plan`` with the async form of each call; a call's exception goes into the plan."""
    run = _Run(plan)
    while run.call is not None:
        run.resume(await _aoutcome(run.call.aio))
    return cast(T, run.answer)
