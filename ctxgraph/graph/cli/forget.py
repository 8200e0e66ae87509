"""``ctxgraph forget``: forget a fact or a text everywhere, under each thread's lock."""

from __future__ import annotations

from functools import partial
from typing import TextIO

from ctxgraph.store.forget import forget
from ctxgraph.store.persistence.connection import Persistence
from ctxgraph.store.persistence.thread_lock import thread_lock

__all__ = ["forget_command"]


def forget_command(
    persistence: Persistence,
    user_id: str,
    *,
    fact: str | None,
    text: str | None,
    thread_id: str | None,
    dry_run: bool,
    wait: float,
    out: TextIO,
    busy_status: int,
) -> int:
    """Run the forget and print its receipt.

    Exit status 0, also when nothing was found; ``busy_status`` when a thread stayed busy
    past ``wait`` and was skipped (the receipt names it; running again finishes).
    """
    receipt = forget(
        persistence.store,
        persistence.checkpointer,
        user_id,
        fact=fact,
        text=text,
        thread_id=thread_id,
        dry_run=dry_run,
        lock=partial(thread_lock, persistence, wait=wait),
    )
    for line in receipt.lines():
        out.write(line + "\n")
    return busy_status if receipt.skipped else 0
