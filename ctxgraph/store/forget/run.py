"""``forget``: one call that finds, redacts and removes a text everywhere, with a receipt.

Order: each thread in turn under its lock when a lock is given (Store copies, then
checkpoints), then the memory (facts deleted, profile redacted), then the receipt. The
memory goes last because a fact's text is what a forget by its key looks for: a forget
stopped midway, or one that skipped a busy thread, leaves the fact for the next run.
Running the same forget again finishes it: every step finds what is left and skips what
is done, and the second receipt lists what it still found.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    nullcontext,
)
from dataclasses import dataclass
from functools import partial
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore, Item, SearchItem

from ctxgraph.state.context import ContextError, validate_label, validate_thread_id
from ctxgraph.state.sans_io import Flow, arun, held, io, run
from ctxgraph.store.forget.memory_copies import (
    PROFILE_KEY,
    Removal,
    afact_namespaces,
    alist_facts,
    fact_namespaces,
    list_facts,
    matching_facts,
    redacted_profile,
)
from ctxgraph.store.forget.thread_copies import (
    AsyncSaverStates,
    AsyncThreadStates,
    SaverStates,
    StatesIo,
    ThreadStates,
    thread_flow,
)
from ctxgraph.store.namespaces import user_facts, user_profile
from ctxgraph.store.ownership import (
    athread_owner,
    athreads_owned_by,
    check_thread_owner,
    thread_owner,
    threads_owned_by,
)
from ctxgraph.store.persistence.thread_lock import ThreadBusyError
from ctxgraph.store.receipts import (
    FORGET,
    Place,
    Receipt,
    astore_receipt,
    new_receipt,
    new_receipt_id,
    receipt_time,
    store_receipt,
)
from ctxgraph.store.redaction import Redactor
from ctxgraph.store.text_codec import decoded, encoded

__all__ = ["ForgetError", "aforget", "forget"]

Lock = Callable[[str], AbstractContextManager[None]]
"""Holds a thread's lock for a block (``thread_lock`` bound to a ``Persistence``)."""

ALock = Callable[[str], AbstractAsyncContextManager[None]]
"""Async :data:`Lock`."""


class ForgetError(ValueError):
    """What to forget is missing, ambiguous or unknown (no such fact for the user)."""


def _checked(user_id: str, fact: str | None, text: str | None, thread_id: str | None) -> None:
    validate_label("user_id", user_id)
    if user_id == "projects":
        raise ContextError("user_id 'projects' is reserved for project memory")
    if (fact is None) == (text is None):
        raise ForgetError("give exactly one of a fact key or a text to forget")
    if thread_id is not None:
        validate_thread_id(thread_id, "thread_id")


def _fact_redactor(
    items: list[SearchItem], key: str, user_id: str, agent_name: str | None
) -> Redactor:
    """The redactor of the user's fact ``key`` (of ``agent_name``, or of any agent)."""
    for item in items:
        if item.key != key or item.namespace[1] != user_id or not isinstance(item.value, dict):
            continue
        if agent_name is None or item.namespace == user_facts(user_id, agent_name):
            return Redactor.for_fact(decoded(item.value))
    raise ForgetError(f"no fact with key {key!r} for user {user_id!r}")


def _redactor(
    items: list[SearchItem],
    user_id: str,
    fact: str | None,
    text: str | None,
    agent_name: str | None,
) -> Redactor:
    if text is not None:
        return Redactor.for_text(text)
    assert fact is not None
    return _fact_redactor(items, fact, user_id, agent_name)


def _receipt(
    user_id: str,
    redactor: Redactor,
    places: list[Place],
    skipped: list[str],
    dry_run: bool,
    rid: str,
    at: str,
) -> Receipt:
    return new_receipt(
        FORGET,
        user_id,
        redactor.digest,
        places,
        dry_run=dry_run,
        receipt_id=rid,
        at=at,
        skipped=skipped,
    )


def _skip_line(thread_id: str, error: ThreadBusyError) -> str:
    text = str(error)
    return text if thread_id in text else f"thread {thread_id}: {text}"


@dataclass(frozen=True)
class _MemoryPlan:
    """What the forget changes in the user's memory: facts to delete, the new profile."""

    removals: list[Removal]
    places: list[Place]
    profile: Any | None

    @classmethod
    def of(
        cls,
        items: list[SearchItem],
        redactor: Redactor,
        user_id: str,
        threads: list[str],
        profile: Item | None,
    ) -> _MemoryPlan:
        removals, places = matching_facts(items, redactor, user_id, frozenset(threads))
        stored = decoded(profile.value) if profile else None
        value, place = redacted_profile(stored, redactor, user_id)
        return cls(removals, places + ([place] if place else []), encoded(value) if place else None)

    @staticmethod
    def due(fact: str | None, skipped: list[str]) -> bool:
        """Whether the memory is changed now.

        Forgetting a fact while a thread was skipped (busy) leaves the fact stored: its
        text is what the next forget of the same key looks for in that thread.
        """
        return not (fact is not None and skipped)


def _forget(
    store: BaseStore,
    states: StatesIo,
    user_id: str,
    request: _Request,
    locks: _Locks,
) -> Flow[Receipt]:
    """The forget, run by ``run`` (:func:`forget`) or ``arun`` (:func:`aforget`)."""
    fact, text, thread_id, dry_run = request.fact, request.text, request.thread_id, request.dry_run
    _checked(user_id, fact, text, thread_id)
    if thread_id is not None:
        owner = yield from io(thread_owner, athread_owner, store, thread_id)
        check_thread_owner(owner, thread_id, user_id)
        threads = [thread_id]
    else:
        threads = yield from io(threads_owned_by, athreads_owned_by, store, user_id)
    namespaces = yield from io(fact_namespaces, afact_namespaces, store, user_id)
    items = yield from io(list_facts, alist_facts, store, namespaces)
    redactor = _redactor(items, user_id, fact, text, request.agent_name)
    rid, at = new_receipt_id(), receipt_time()
    places: list[Place] = []
    skipped: list[str] = []
    for thread in threads:
        flow = thread_flow(store, states, thread, redactor, receipt_id=rid, at=at, dry_run=dry_run)
        try:
            places += yield from locks.held(thread, flow)
        except ThreadBusyError as error:
            skipped.append(_skip_line(thread, error))
    profile = yield from io(store.get, store.aget, user_profile(user_id), PROFILE_KEY)
    memory = _MemoryPlan.of(items, redactor, user_id, threads, profile)
    if memory.due(fact, skipped):
        if not dry_run:
            for namespace, key in memory.removals:
                yield from io(store.delete, store.adelete, namespace, key)
            if memory.profile is not None:
                yield from io(
                    store.put,
                    store.aput,
                    user_profile(user_id),
                    PROFILE_KEY,
                    memory.profile,
                    index=False,
                )
        places = memory.places + places
    receipt = _receipt(user_id, redactor, places, skipped, dry_run, rid, at)
    yield from io(store_receipt, astore_receipt, store, receipt)
    return receipt


def forget(
    store: BaseStore,
    checkpointer: BaseCheckpointSaver[Any] | ThreadStates,
    user_id: str,
    *,
    fact: str | None = None,
    text: str | None = None,
    thread_id: str | None = None,
    dry_run: bool = False,
    agent_name: str | None = None,
    lock: Lock | None = None,
) -> Receipt:
    """Forget a fact (``fact`` = its key) or a text everywhere the user's data holds it.

    Args:
        store: The Store holding memory, archives and artifacts.
        checkpointer: The thread checkpointer (or any ``ThreadStates``).
        user_id: Whose data; only threads this user owns are searched.
        fact: Key of one of the user's facts: its content, evidence, history and the
            identifiers in them are forgotten.
        text: A text to forget (at least three characters).
        thread_id: Search only this thread (it must be the user's) and the memory.
        dry_run: List the places, change nothing, store no receipt.
        agent_name: Look the fact up only among this agent's facts (default: any).
        lock: Holds a thread's lock while that thread is redacted.

    Returns:
        The receipt (stored unless ``dry_run``).

    Raises:
        ForgetError: Neither or both of ``fact`` and ``text``, or no such fact.
        ContextError: An invalid user or thread id; ``ThreadOwnerError`` when the thread
            belongs to another user.
        RedactionError: A text too short to forget.

    """
    states = (
        SaverStates(checkpointer) if isinstance(checkpointer, BaseCheckpointSaver) else checkpointer
    )
    request = _Request(fact, text, thread_id, dry_run, agent_name)
    locks = _Locks(lock=lock)
    return run(_forget(store, StatesIo(sync=states), user_id, request, locks))


async def aforget(
    store: BaseStore,
    checkpointer: BaseCheckpointSaver[Any] | AsyncThreadStates,
    user_id: str,
    *,
    fact: str | None = None,
    text: str | None = None,
    thread_id: str | None = None,
    dry_run: bool = False,
    agent_name: str | None = None,
    lock: ALock | None = None,
) -> Receipt:
    """Async :func:`forget` (async Store and checkpointer; ``lock`` is async too).

    ``checkpointer`` may also be an ``AsyncThreadStates``: a LangGraph server's threads
    reached through its SDK, where no checkpointer is at hand.
    """
    states: AsyncThreadStates = (
        AsyncSaverStates(checkpointer)
        if isinstance(checkpointer, BaseCheckpointSaver)
        else checkpointer
    )
    request = _Request(fact, text, thread_id, dry_run, agent_name)
    locks = _Locks(alock=lock)
    return await arun(_forget(store, StatesIo(asynchronous=states), user_id, request, locks))


@dataclass(frozen=True)
class _Request:
    """What to forget, where, and whether only to look."""

    fact: str | None
    text: str | None
    thread_id: str | None
    dry_run: bool
    agent_name: str | None


@dataclass(frozen=True)
class _Locks:
    """The thread lock of the driver that runs the forget (none: no lock)."""

    lock: Lock | None = None
    alock: ALock | None = None

    def held(self, thread_id: str, flow: Flow[list[Place]]) -> Flow[list[Place]]:
        """Run ``flow`` holding ``thread_id``'s lock."""
        lock, alock = self.lock or _no_lock, self.alock or _no_alock
        return held(partial(lock, thread_id), partial(alock, thread_id), flow)


def _no_lock(thread_id: str) -> AbstractContextManager[None]:
    return nullcontext()


@asynccontextmanager
async def _no_alock(thread_id: str) -> AsyncIterator[None]:
    yield
