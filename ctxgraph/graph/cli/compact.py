"""``ctxgraph threads compact``: run a thread's background compaction job now and wait for it.

The job summarizes the messages the next compaction would fold, from the thread's latest
checkpoint, and stores the result in the Store (``("threads", id, "compaction_jobs")``);
the next turn that reaches a trigger applies it without a summary call. The job writes
nothing to the thread's state, so it does not hold the thread: a chat may run on it
meanwhile (a result that no longer fits the thread is then discarded when seen).

The command prints one line, ``T`` being the thread id:

- ``thread T: background compaction job finished in 1.2 s: it folds 4 messages of v0;
  the next turn that reaches a trigger applies it`` (status 0): the job this command
  started stored its result;
- ``thread T: joined the running job; it finished in 1.2 s: it folds 4 messages of v0;
  the next turn that reaches a trigger applies it`` (status 0): another process's job
  held the thread, and this command waited for its result;
- ``thread T: a compaction job result is already stored (folds 4 messages of v0); the
  next turn that reaches a trigger applies it`` (status 0): nothing was started;
- ``thread T: nothing old enough to fold`` (status 0): the thread is too short;
- ``thread T: no compaction job started: the compacted request would not fit, so no
  summary was asked for: ...`` (status 0): no summary could make the request fit, so
  none was paid for;
- ``thread T: the compaction job is still running after 300 s; it is abandoned and its
  lease released as this command exits`` (status 1): this command's own job outlasted
  ``--wait`` (the next trigger compacts inline, or starts another job);
- ``thread T: the running compaction job is still running after 300 s; it goes on in the
  process that runs it`` (status 1): the job of another process outlasted ``--wait``;
- ``thread T: the compaction job ended without a result (see the log line above)``
  (status 1): the ``compaction.failed`` (or ``compaction.discarded``) warning on standard
  error says why;
- ``thread T: the running compaction job ended without a result (it ran in another
  process; see its log)`` (status 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TextIO, cast

from ctxgraph.graph.builder import compaction_node
from ctxgraph.graph.cli.render import plural
from ctxgraph.graph.cli.threads import check_owner, saved_values
from ctxgraph.graph.environment import EnvironmentConfig
from ctxgraph.nodes.compaction.jobs import JobResult
from ctxgraph.nodes.compaction.node import UNFIT, Launch
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.settings import SettingsError
from ctxgraph.store.persistence.compaction_lease import leases_for
from ctxgraph.store.persistence.connection import open_persistence

APPLIED_LATER = "the next turn that reaches a trigger applies it"
"""How every line about a stored result ends."""


def compact_command(
    thread_id: str, user_id: str | None, wait_s: float, environ: Mapping[str, str], out: TextIO
) -> int:
    """Run the background compaction job of ``thread_id`` and wait up to ``wait_s`` seconds.

    The models, tools, settings and subagents come from ``environ`` (as ``chat`` reads
    them), and a configuration error is raised before the database is opened; so is a
    ``SettingsError`` unless ``compaction_mode`` is ``background`` (only that mode applies
    a stored result). With ``user_id``, a thread another user owns is refused; a thread
    never saved raises ``UnknownThreadError``. Writes one line to ``out`` (see the module
    docstring) and returns the exit status: 0 when a result is stored or there is nothing
    to fold, 1 when the job is still running or ended without one.
    """
    configured = EnvironmentConfig.read(environ)
    settings = configured.settings
    if settings.compaction_mode != "background":
        raise SettingsError(
            "threads compact stores a result that only background compaction applies: set "
            "CTXGRAPH_COMPACTION_MODE=background"
        )
    node = compaction_node(
        models=configured.models,
        tools=configured.tools,
        settings=settings,
        subagents=configured.subagents,
    )
    with open_persistence() as persistence:
        check_owner(persistence, thread_id, user_id)
        state = cast(AgentState, saved_values(persistence, thread_id))
        launch = node.run_job(state, persistence.store, thread_id, wait_s=wait_s)
        if launch.state == "running" and launch.lease is not None:
            # The job's thread ends with this process: free the thread for the next job.
            leases_for(persistence.store).release(launch.lease)
    line, status = outcome_line(thread_id, launch, wait_s)
    out.write(line + "\n")
    return status


def outcome_line(thread_id: str, launch: Launch, wait_s: float) -> tuple[str, int]:
    """The line ``threads compact`` prints for ``launch``, and its exit status."""
    head = f"thread {thread_id}:"
    result = launch.result
    if launch.state == "completed" and result is not None:
        return f"{head} background compaction job finished in {_finished(result)}", 0
    if launch.state == "joined" and result is not None:
        return f"{head} joined the running job; it finished in {_finished(result)}", 0
    if launch.state == "ready" and result is not None:
        return (
            f"{head} a compaction job result is already stored (folds {_folds(result)}); "
            f"{APPLIED_LATER}",
            0,
        )
    if launch.state == "nothing to fold":
        return f"{head} nothing old enough to fold", 0
    if launch.state == UNFIT:
        return f"{head} no compaction job started: {launch.reason}", 0
    own = launch.lease is not None
    if launch.state == "running" and own:
        return (
            f"{head} the compaction job is still running after {wait_s:g} s; it is abandoned "
            "and its lease released as this command exits",
            1,
        )
    if launch.state in ("running", "busy"):
        return (
            f"{head} the running compaction job is still running after {wait_s:g} s; it goes "
            "on in the process that runs it",
            1,
        )
    if own:
        return f"{head} the compaction job ended without a result (see the log line above)", 1
    return (
        f"{head} the running compaction job ended without a result (it ran in another "
        "process; see its log)",
        1,
    )


def _folds(result: JobResult) -> str:
    """``4 messages of v0``."""
    return f"{plural(len(result.folded_ids), 'message')} of v{result.base_version}"


def _finished(result: JobResult) -> str:
    """``1.2 s: it folds 4 messages of v0; the next turn ...``."""
    return f"{result.latency_s:.1f} s: it folds {_folds(result)}; {APPLIED_LATER}"
