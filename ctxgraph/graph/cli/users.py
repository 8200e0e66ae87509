"""``ctxgraph users delete USER [--dry-run]``: delete a user and print the receipt."""

from __future__ import annotations

from typing import TextIO

from ctxgraph.store.persistence.connection import Persistence
from ctxgraph.store.user_deletion import delete_user


def delete_user_command(
    persistence: Persistence, user_id: str, out: TextIO, *, dry_run: bool, wait: float
) -> int:
    """Delete ``user_id`` (or, with ``dry_run``, count what would go) and print the receipt.

    Each of the user's threads is deleted while its lock is held, so a running turn ends
    first; ``wait`` is how long to wait for it. Exit status 0, also when nothing was found.
    """
    receipt = delete_user(
        persistence.store,
        persistence.checkpointer,
        user_id,
        dry_run=dry_run,
        connection=persistence,
        wait=wait,
    )
    for line in receipt.lines():
        print(line, file=out)
    return 0
