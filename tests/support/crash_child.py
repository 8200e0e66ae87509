"""Runs compacting turns that die just before their N-th durable write, one forked child each.

``python -m tests.support.crash_child URI PREFIX`` first runs thread ``PREFIX-0`` without
crashing and counts the durable writes of its compacting turn: every checkpoint ``put``,
every ``put_writes`` and every Store write. Then, for n = 1..K, a forked child runs the
same setup turns on thread ``PREFIX-n`` and ends its compacting turn with ``os._exit(17)``
just before write n, and thread ``PREFIX-leftover`` dies just before the compact node's
own writes (after its archive write). The parent imports everything once, so each child
only does the work. It prints one JSON object: the writes of the counted turn and each
child's exit status.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.base import Op, PutOp, Result
from langgraph.store.postgres import PostgresStore

from ctxgraph.graph import build_graph
from ctxgraph.state import Context, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools

CRASH_STATUS = 17
SETTINGS = Settings(trigger_messages=8, keep_messages=2, memory_extraction="inline")
"""Small enough that the setup turns compact once and the crashing turn compacts again;
extraction inline, so every run makes its writes in the same order (a background
extraction would write when its thread gets to it)."""
CONTEXT = Context(user_id="crash-user")
LEFTOVER_CRASH = "compaction"
"""Dies before the first write that carries the ``compaction`` channel: the compact node's."""
FILLER = " ".join(["The carrier confirmed the pickup window and the customs papers."] * 12)
"""Long enough that the first compaction saves more than the ``read_history`` schema it binds."""
SETUP_TURNS = [f"Setup note {n}: parcel P-{100 + n} leaves dock {n}. {FILLER}" for n in range(1, 6)]
CRASH_TURN = "Crash note: parcel P-999 leaves dock 9."
AFTER_TURN = "After note: parcel P-777 arrives at dock 7."


class Writes:
    """Counts durable writes; once armed, ends the process just before write ``crash_at``.

    ``crash_on`` instead ends it before the first write whose description contains it.
    """

    def __init__(self) -> None:
        self.crash_at = 0
        self.crash_on: str | None = None
        self.kinds: list[str] = []
        self._lock = threading.Lock()

    def arm(self, crash_at: int, crash_on: str | None = None) -> None:
        with self._lock:
            self.crash_at, self.crash_on = crash_at, crash_on
            self.kinds = []

    def before(self, kind: str) -> None:
        with self._lock:
            self.kinds.append(kind)
            if len(self.kinds) == self.crash_at or (self.crash_on and self.crash_on in kind):
                os._exit(CRASH_STATUS)


WRITES = Writes()


class CrashSaver(PostgresSaver):
    """A Postgres checkpointer that reports each write to ``WRITES`` first."""

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        WRITES.before(f"checkpoint put (step {metadata.get('step')})")
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        WRITES.before("put_writes " + ",".join(sorted({channel for channel, _ in writes})))
        super().put_writes(config, writes, task_id, task_path)


class CrashStore(PostgresStore):
    """A Postgres Store that reports each batch that writes to ``WRITES`` first."""

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        puts = [op for op in ops if isinstance(op, PutOp)]
        if puts:
            WRITES.before("store " + ",".join(sorted({"/".join(op.namespace) for op in puts})))
        return super().batch(ops)


def config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def run_thread(uri: str, thread_id: str, crash_at: int, crash_on: str | None) -> dict[str, Any]:
    """Setup turns, then the compacting turn with the crash armed at ``crash_at`` (0: none)."""
    with CrashSaver.from_conn_string(uri) as saver, CrashStore.from_conn_string(uri) as store:
        graph = build_graph(
            checkpointer=saver,
            store=store,
            models=demo_models(),
            tools=demo_tools(),
            settings=SETTINGS,
        )
        for text in SETUP_TURNS:
            graph.invoke({"messages": [HumanMessage(text)]}, config(thread_id), context=CONTEXT)
        before = (graph.get_state(config(thread_id)).values.get("compaction") or {}).get("version")
        WRITES.arm(crash_at, crash_on)
        graph.invoke({"messages": [HumanMessage(CRASH_TURN)]}, config(thread_id), context=CONTEXT)
        writes = WRITES.kinds
        WRITES.arm(0)
        after = (graph.get_state(config(thread_id)).values.get("compaction") or {}).get("version")
        return {"writes": writes, "versions": [before, after]}


def forked(
    uri: str, thread_id: str, crash_at: int, crash_on: str | None = None
) -> tuple[int, dict[str, Any] | None]:
    """Run ``run_thread`` in a forked child; its exit status and, if it finished, its report."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns, never runs the parent's exit handlers
        os.close(read_end)
        try:
            report = run_thread(uri, thread_id, crash_at, crash_on)
            os.write(write_end, json.dumps(report).encode())
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), json.loads(data) if data else None


def main(argv: Sequence[str]) -> int:
    uri, prefix = argv
    status, counted = forked(uri, f"{prefix}-0", 0)
    if status != 0 or counted is None:
        print(json.dumps({"error": f"the counting run exited with {status}"}))
        return 1
    statuses: dict[str, int] = {
        str(n): forked(uri, f"{prefix}-{n}", n)[0] for n in range(1, len(counted["writes"]) + 1)
    }
    # Saved writes run in the background, so write n is not always the same write: one
    # more child dies just before the compact node's own writes, after its archive write.
    statuses["leftover"] = forked(uri, f"{prefix}-leftover", 0, LEFTOVER_CRASH)[0]
    print(json.dumps({"counted": counted, "statuses": statuses}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
