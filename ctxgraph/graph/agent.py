"""The compiled graph that ``langgraph.json`` serves; the platform injects persistence.

Background compaction jobs are queued as runs of the ``compaction_worker`` graph that
``langgraph.json`` serves next to it, so the server's run queue carries them. Memory
extraction (``memory_extraction="background"``, the default) runs as a task on the server's
event loop after each run, so no run waits for the memory model; the rows are queued in the
server's Store first, and the ``memory_worker`` graph processes what a stopped server left.
"""

from __future__ import annotations

from ctxgraph.graph.served import ROOT
from ctxgraph.nodes.compaction.job_queue import ServerJobQueue

graph = ROOT.agent(compaction_queue=ServerJobQueue())
