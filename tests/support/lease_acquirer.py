"""Tries to take one compaction lease, for the several-processes lease test.

Usage: ``python -m tests.support.lease_acquirer THREAD TTL``; the database is
``DATABASE_URI``. The child connects, prints ``ready``, waits for a line on stdin, then
tries once and prints ``token N`` or ``busy``.
"""

from __future__ import annotations

import os
import sys

from langgraph.store.postgres import PostgresStore

from ctxgraph.store.persistence.compaction_lease import leases_for, new_holder


def main(thread_id: str, ttl_s: float) -> None:
    with PostgresStore.from_conn_string(os.environ["DATABASE_URI"]) as store:
        leases = leases_for(store)
        print("ready", flush=True)
        sys.stdin.readline()
        lease = leases.acquire(thread_id, new_holder(), ttl_s)
        print(f"token {lease.token}" if lease else "busy", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
