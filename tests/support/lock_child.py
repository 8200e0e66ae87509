"""A library caller: runs turns on one thread with ``graph.invoke`` inside ``thread_lock``.

Usage: ``python -m tests.support.lock_child URI THREAD NAME TURNS``. Turn ``k`` sends
"What is {NAME}{k} * 7?" (NAME is digits), and the child prints one line per turn.
"""

from __future__ import annotations

import sys

from ctxgraph.graph import build_graph
from ctxgraph.state import Context, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.store.persistence import open_persistence, thread_lock


def main(uri: str, thread_id: str, name: str, turns: int) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    with open_persistence(uri) as persistence:
        graph = build_graph(
            checkpointer=persistence.checkpointer,
            store=persistence.store,
            models=demo_models(),
            tools=demo_tools(),
            settings=Settings(trigger_messages=12, keep_messages=4),
        )
        for turn in range(turns):
            with thread_lock(persistence, thread_id):
                result = graph.invoke(
                    {"messages": [("user", f"What is {name}{turn} * 7?")]},
                    config,
                    context=Context(user_id="lock-child"),
                )
            print(f"turn {name}{turn}: {result['messages'][-1].content}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
