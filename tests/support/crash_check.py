"""Reads threads left by ``crash_child`` from a fresh process, before and after one more turn.

``python -m tests.support.crash_check URI THREAD...`` prints, per thread, the output of
``threads show`` and ``threads verify`` (with its exit status) as the command line
computes them, then runs one more turn on the thread and prints them again, as JSON.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import HumanMessage

from ctxgraph.graph import build_graph
from ctxgraph.graph.cli.threads import show_thread, verify_thread_command
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.store.persistence.connection import Persistence, open_persistence
from tests.support.crash_child import AFTER_TURN, CONTEXT, SETTINGS, config


def inspect(persistence: Persistence, thread_id: str) -> dict[str, Any]:
    shown, verified = io.StringIO(), io.StringIO()
    show_thread(persistence, thread_id, shown)
    status = verify_thread_command(persistence, thread_id, verified)
    return {"show": shown.getvalue(), "verify": verified.getvalue(), "status": status}


def main(argv: Sequence[str]) -> int:
    uri, *threads = argv
    found: dict[str, Any] = {}
    with open_persistence(uri) as persistence:
        graph = build_graph(
            checkpointer=persistence.checkpointer,
            store=persistence.store,
            models=demo_models(),
            tools=demo_tools(),
            settings=SETTINGS,
        )
        for thread_id in threads:
            before = inspect(persistence, thread_id)
            graph.invoke(
                {"messages": [HumanMessage(AFTER_TURN)]}, config(thread_id), context=CONTEXT
            )
            mark = graph.get_state(config(thread_id)).values.get("compaction") or {}
            found[thread_id] = {
                "before": before,
                "after": inspect(persistence, thread_id),
                "version": mark.get("version"),
            }
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
