"""Writes one fact change in its own process, for the two-process search freshness test.

Usage: ``python -m tests.support.search_child add USER_ID KEY CONTENT``
or ``python -m tests.support.search_child forget USER_ID KEY``; the database is
``DATABASE_URI``. Prints ``added KEY`` or ``forgot KEY`` (``missing KEY`` if nothing was
deleted) and exits 0.
"""

from __future__ import annotations

import os
import sys

from ctxgraph.state.context import Context
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.persistence.connection import open_persistence


def main(argv: list[str]) -> int:
    action, user_id, key, *rest = argv
    context = Context(user_id=user_id)
    with open_persistence(os.environ["DATABASE_URI"]) as persistence:
        repo = MemoryRepository(persistence.store)
        if action == "add":
            (content,) = rest
            fact = repo.add_fact(context, content, key=key)
            print(f"added {fact.key}")
        elif action == "forget":
            print(f"{'forgot' if repo.forget(context, key) else 'missing'} {key}")
        else:
            raise SystemExit(f"unknown action {action!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
