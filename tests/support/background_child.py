"""One process of a background-compaction session on a shared Postgres thread.

``python -m tests.support.background_child URI THREAD MODE LOG`` builds the graph in
background mode with a scripted main model and a summary model that appends one line to
``LOG`` per call (and, with ``MODE=refuse``, raises instead of answering). Modes:

- ``turn``: once the graph is built, touch ``ready-<pid>`` in the folder
  ``CTXGRAPH_TEST_GO`` and wait for a ``go`` file there; then run one turn (message read
  from ``CTXGRAPH_TEST_TEXT``), wait for the jobs of this process, exit. Many of these
  released together are concurrent triggers.
- ``until-ready``: run turns until a job is started, wait for it, then end the process
  with ``os._exit`` (no cleanup): its result is stored, never applied.
- ``refuse``: run turns until a compaction is applied; the summary model raises if called.

It prints one JSON line: the events seen, the turns run and the thread's mark version.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from ctxgraph.graph import Graph, build_graph
from ctxgraph.nodes.compaction.background import wait_for_jobs
from ctxgraph.nodes.compaction.summarizer import SUMMARY_SYSTEM
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_summary
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.persistence import open_persistence

SETTINGS = Settings(
    trigger_messages=14,
    keep_messages=2,
    memory_extraction="off",
    compaction_mode="background",
    background_fraction=0.5,
    background_wait_s=0,
)
"""Background mode with small triggers: a job starts at 7 request messages, the trigger
fires at 14, and a step at the trigger does not wait for a running job."""
FILLER = "The carrier confirmed the pickup window and the customs papers were filed. " * 12
CONTEXT = Context(user_id="background-user")


def turn_text(n: int) -> str:
    """The user's message of turn ``n``."""
    return f"Note {n}: parcel P-{n:04d} leaves dock {n % 5}. {FILLER}"


def turn_events(graph: Graph, config: Any, text: str, context: Context) -> list[dict[str, Any]]:
    """Run one turn with the user message ``text``; the custom stream chunks it emitted."""
    return list(
        graph.stream(
            {"messages": [HumanMessage(content=text)]},
            config,
            context=context,
            stream_mode="custom",
        )
    )


def _wait_for_go(folder: Path) -> None:
    """Say this process is ready, then wait for the ``go`` file: all start at once."""
    (folder / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + 120
    while not (folder / "go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("no go signal")
        time.sleep(0.005)


def main() -> int:
    """Run the mode named on the command line; see the module docstring."""
    uri, thread, mode, log = sys.argv[1:5]
    log_path = Path(log)

    def summarize(messages: list[BaseMessage]) -> AIMessage:
        with log_path.open("a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\n")
        if mode == "refuse":
            raise RuntimeError("this process must not call the summary model")
        time.sleep(float(os.environ.get("CTXGRAPH_TEST_SUMMARY_DELAY", "0.5")))
        content = messages[-1].content
        assert isinstance(content, str)
        return demo_summary(content)

    def answer(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[0], SystemMessage) and messages[0].content == SUMMARY_SYSTEM:
            return summarize(messages)
        asked = [m for m in messages if isinstance(m, HumanMessage)][-1]
        return AIMessage(content=f"Noted: {asked.text[:40]}")

    events: list[str] = []
    reasons: list[str] = []
    with open_persistence(uri) as db:
        graph = build_graph(
            checkpointer=db.checkpointer,
            store=db.store,
            models=Models(
                main=ScriptedChatModel(responder=answer),
                summary=ScriptedChatModel(responder=summarize),
            ),
            settings=SETTINGS,
        )
        config: Any = {"configurable": {"thread_id": thread}}

        def turn(text: str) -> None:
            for chunk in turn_events(graph, config, text, CONTEXT):
                events.append(str(chunk["event"]))
                if chunk.get("reason"):
                    reasons.append(str(chunk["reason"]))

        def report(turns: int) -> None:
            mark = graph.get_state(config).values.get("compaction") or {}
            version = mark.get("version")
            print(
                json.dumps(
                    {"events": events, "reasons": reasons, "turns": turns, "version": version}
                )
            )
            sys.stdout.flush()

        if mode == "turn":
            _wait_for_go(Path(os.environ["CTXGRAPH_TEST_GO"]))
            turn(os.environ["CTXGRAPH_TEST_TEXT"])
            wait_for_jobs(30)
            report(1)
            return 0
        target = "compaction.started" if mode == "until-ready" else "compaction.applied"
        start = int(os.environ.get("CTXGRAPH_TEST_FIRST_TURN", "1"))
        for n in range(start, start + 20):
            turn(turn_text(n))
            if target in events:
                break
        if mode == "until-ready":
            wait_for_jobs(30)
            report(n - start + 1)
            os._exit(0)
        report(n - start + 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
