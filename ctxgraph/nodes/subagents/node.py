"""The ``subagent`` node: runs one ``task`` call's child and returns its bounded result.

Each ``task`` call is its own node task (see ``route``), so each child checkpoints in a
namespace of its own under the parent's thread, and one child failing or timing out never
stops its siblings. The node writes only a ``ToolMessage`` (through ``add_messages``) and
the call's final ``delegations`` entry (through its reducer), and adds the child's
``model_usage`` totals (role ``subagent``) to its own, so any number of children can
finish in one step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp, GraphRecursionError
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore

from ctxgraph.nodes.settings import settings_for
from ctxgraph.nodes.subagents.render import brief
from ctxgraph.nodes.subagents.result import (
    Outcome,
    Refs,
    answer_budget,
    child_prompt,
    completed_outcome,
    cut_answer,
    final_entry,
    result_message,
    transcript_text,
)
from ctxgraph.nodes.subagents.route import TaskPayload
from ctxgraph.nodes.subagents.stop import (
    STOPS_KEY,
    StopFlag,
    SubagentStoppedError,
    flag_ids,
    registered,
    with_flag,
)
from ctxgraph.nodes.subagents.tool import TASK_TOOL, parse_task_arguments, task_text
from ctxgraph.state.settings import Settings
from ctxgraph.state.subagents import SubagentSpec
from ctxgraph.state.usage import UsageTotals, add_usage
from ctxgraph.store.artifacts import ArtifactStore

logger = logging.getLogger("ctxgraph.subagents")

ChildGraph = CompiledStateGraph[Any, Any, Any, Any]

STOPPED = {"timeout": ("timed_out", "timeout"), "cancelled": ("cancelled", "cancelled")}
"""A stop flag's reason, as the delegation's status and stop reason."""


@dataclass(frozen=True)
class Child:
    """A subagent type and its compiled graph."""

    spec: SubagentSpec
    graph: ChildGraph


@dataclass
class _Run:
    """One child run being prepared or finished."""

    call_id: str
    kind: str
    brief: str
    input: dict[str, Any]
    config: RunnableConfig
    flag: StopFlag
    settings: Settings
    started: float
    last: list[BaseMessage]
    usage: UsageTotals = field(default_factory=dict)
    """The child's ``model_usage`` as of its last state (its own and nested calls)."""

    def seen(self, values: Mapping[str, Any]) -> None:
        """Take the child's latest state: its messages and its usage totals."""
        self.last = list(values.get("messages") or [])
        usage = values.get("model_usage")
        if isinstance(usage, Mapping):
            self.usage = add_usage(None, dict(usage))


def _stopped(flag: StopFlag, fallback: str) -> tuple[str, str]:
    return STOPPED.get(flag.reason or fallback, STOPPED["cancelled"])


def _put_args(run: _Run, part: str) -> dict[str, Any]:
    """``ArtifactStore.put`` arguments of one of a child's artifacts."""
    return {"source_id": run.call_id, "tool_name": TASK_TOOL, "part": part}


def _unstored(run: _Run, error: Exception) -> Refs:
    logger.warning("subagent %s (task %s): artifacts not stored: %s", run.kind, run.call_id, error)
    return Refs(problem=str(error))


class SubagentNode:
    """Runs the child a ``task`` call asks for, under the run's limits; never raises for it."""

    def __init__(self, children: Mapping[str, Child], settings: Settings) -> None:
        self._children = dict(children)
        self._settings = settings

    # --- before and after the child ---------------------------------------------------

    def _refused(
        self, payload: TaskPayload, status: str, reason: str, message: str
    ) -> dict[str, Any]:
        call = payload["call"]
        args = call["args"] if isinstance(call["args"], Mapping) else {}
        kind = args.get("subagent_type")
        description = args.get("description")
        text = f"{message}\n\n[subagent {kind or '?'}: {status} ({reason})]"
        result = ToolMessage(
            content=text,
            tool_call_id=str(call["id"]),
            name=TASK_TOOL,
            status="error",
            additional_kwargs={
                "subagent": {
                    "type": kind if isinstance(kind, str) else "?",
                    "status": status,
                    "stop_reason": reason,
                    "result_sha256": None,
                    "result_ref": None,
                    "transcript_ref": None,
                    "checkpoint_ns": None,
                    "tokens_in": 0,
                    "tokens_out": 0,
                    "elapsed_s": 0.0,
                }
            },
        )
        entry_brief = brief(description) if isinstance(description, str) else ""
        return {
            "messages": [result],
            "delegations": [final_entry(str(call["id"]), result, entry_brief)],
        }

    def _prepare(
        self, payload: TaskPayload, runtime: Any, config: RunnableConfig, flag: StopFlag
    ) -> _Run | dict[str, Any]:
        """The run to start, or the finished update of a call that starts no child."""
        refusal = payload.get("refusal")
        if refusal is not None:
            return self._refused(
                payload, refusal["status"], refusal["stop_reason"], refusal["message"]
            )
        call = payload["call"]
        arguments = parse_task_arguments(call["args"])
        if isinstance(arguments, str):
            return self._refused(payload, "failed", "invalid_arguments", arguments)
        child = self._children.get(arguments.subagent_type)
        if child is None:
            valid = ", ".join(sorted(self._children))
            return self._refused(
                payload,
                "failed",
                "unknown_type",
                f"unknown subagent_type {arguments.subagent_type!r}; the valid types are: {valid}.",
            )
        settings = settings_for(getattr(runtime, "context", None), self._settings)
        configurable = dict(config.get("configurable") or {})
        configurable[STOPS_KEY] = with_flag(flag_ids(config), flag)
        child_config: RunnableConfig = {
            **config,
            "recursion_limit": settings.subagent_max_steps,
            "configurable": configurable,
        }
        prompt = child_prompt(child.spec.system_prompt)
        question = HumanMessage(content=task_text(arguments), id="subagent-task")
        return _Run(
            call_id=str(call["id"]),
            kind=child.spec.name,
            brief=brief(arguments.description),
            input={"messages": [prompt, question]},
            config=child_config,
            flag=flag,
            settings=settings,
            started=time.monotonic(),
            last=[prompt, question],
        )

    def _finish(self, run: _Run, outcome: Outcome, refs: Refs) -> dict[str, Any]:
        ns = (run.config.get("configurable") or {}).get("checkpoint_ns")
        message = result_message(
            run.call_id,
            run.kind,
            outcome,
            refs,
            run.settings.subagent_result_tokens,
            ns if isinstance(ns, str) else None,
        )
        logger.info(
            "subagent %s (task %s): %s (%s) after %.1f s",
            run.kind,
            run.call_id,
            outcome.status,
            outcome.stop_reason,
            outcome.elapsed_s,
        )
        update: dict[str, Any] = {
            "messages": [message],
            "delegations": [final_entry(run.call_id, message, run.brief)],
        }
        if run.usage:
            update["model_usage"] = run.usage
        return update

    def _child(self, run: _Run) -> ChildGraph:
        return self._children[run.kind].graph

    @staticmethod
    def _failed(run: _Run, error: BaseException) -> Outcome:
        """How a child that raised ended; a stopped child ended for its flag's reason."""
        if isinstance(error, GraphRecursionError):
            return Outcome("capped", "step_limit", run.last, error=None)
        if isinstance(error, SubagentStoppedError) or run.flag.is_set():
            reason = error.reason if isinstance(error, SubagentStoppedError) else "cancelled"
            status, reason = _stopped(run.flag, reason)
            return Outcome(status, reason, run.last)  # type: ignore[arg-type]
        logger.warning("subagent %s (task %s) raised %r", run.kind, run.call_id, error)
        return Outcome("failed", "error", run.last, error=f"{type(error).__name__}: {error}")

    @staticmethod
    def _artifacts(runtime: Any, config: RunnableConfig) -> ArtifactStore | str:
        store = getattr(runtime, "store", None)
        thread_id = (config.get("configurable") or {}).get("thread_id")
        if not isinstance(store, BaseStore):
            return "the run has no LangGraph Store"
        if not isinstance(thread_id, str) or not thread_id:
            return "the run has no thread id"
        return ArtifactStore(store, thread_id)

    @staticmethod
    def _texts(run: _Run, outcome: Outcome) -> list[tuple[str, str]]:
        """The artifacts to store: the transcript, and the full answer when it will be cut."""
        texts = [("transcript", transcript_text(outcome.messages))]
        answer = outcome.final_text()
        _, _, cut = cut_answer(answer, answer_budget(run.settings.subagent_result_tokens))
        if cut:
            texts.append(("answer", answer))
        return texts

    # --- sync ---------------------------------------------------------------------------

    def _stream(self, run: _Run) -> Iterator[Mapping[str, Any]]:
        yield from self._child(run).stream(run.input, run.config, stream_mode="values")

    def _run_sync(self, run: _Run) -> Outcome:
        timer = threading.Timer(run.settings.subagent_timeout_s, run.flag.set, args=("timeout",))
        timer.daemon = True
        timer.start()
        try:
            for values in self._stream(run):
                run.seen(values)
        except GraphBubbleUp:
            raise
        except KeyboardInterrupt:
            run.flag.set("cancelled")
            raise
        except Exception as error:
            outcome = self._failed(run, error)
        else:
            outcome = completed_outcome(run.last, 0.0)
        finally:
            timer.cancel()
        outcome.elapsed_s = time.monotonic() - run.started
        return outcome

    def _refs(self, runtime: Any, run: _Run, outcome: Outcome) -> Refs:
        artifacts = self._artifacts(runtime, run.config)
        if isinstance(artifacts, str):
            return Refs(problem=artifacts)
        try:
            refs = {
                part: artifacts.put("tool_result", text, **_put_args(run, part)).ref
                for part, text in self._texts(run, outcome)
            }
        except Exception as error:  # the result still reaches the parent
            return _unstored(run, error)
        return Refs(transcript=refs.get("transcript"), answer=refs.get("answer"))

    def invoke(self, payload: TaskPayload, runtime: Any, config: RunnableConfig) -> dict[str, Any]:
        """Run the child synchronously; its stop flag is checked before each model call."""
        with registered() as flag:
            run = self._prepare(payload, runtime, config, flag)
            if not isinstance(run, _Run):
                return run
            outcome = self._run_sync(run)
        return self._finish(run, outcome, self._refs(runtime, run, outcome))

    # --- async --------------------------------------------------------------------------

    async def _astream(self, run: _Run) -> AsyncIterator[Mapping[str, Any]]:
        async for values in self._child(run).astream(run.input, run.config, stream_mode="values"):
            yield values

    async def _consume(self, run: _Run) -> None:
        async for values in self._astream(run):
            run.seen(values)

    async def _run_async(self, run: _Run) -> Outcome:
        try:
            await asyncio.wait_for(self._consume(run), run.settings.subagent_timeout_s)
        except GraphBubbleUp:
            raise
        except asyncio.CancelledError:
            run.flag.set("cancelled")
            raise
        except TimeoutError:
            run.flag.set("timeout")
            outcome = Outcome("timed_out", "timeout", run.last)
        except Exception as error:
            outcome = self._failed(run, error)
        else:
            outcome = completed_outcome(run.last, 0.0)
        outcome.elapsed_s = time.monotonic() - run.started
        return outcome

    async def _arefs(self, runtime: Any, run: _Run, outcome: Outcome) -> Refs:
        artifacts = self._artifacts(runtime, run.config)
        if isinstance(artifacts, str):
            return Refs(problem=artifacts)
        try:
            refs = {
                part: (await artifacts.aput("tool_result", text, **_put_args(run, part))).ref
                for part, text in self._texts(run, outcome)
            }
        except Exception as error:  # the result still reaches the parent
            return _unstored(run, error)
        return Refs(transcript=refs.get("transcript"), answer=refs.get("answer"))

    async def ainvoke(
        self, payload: TaskPayload, runtime: Any, config: RunnableConfig
    ) -> dict[str, Any]:
        """Run the child as a task: a timeout or a cancelled parent run cancels it."""
        with registered() as flag:
            run = self._prepare(payload, runtime, config, flag)
            if not isinstance(run, _Run):
                return run
            outcome = await self._run_async(run)
        return self._finish(run, outcome, await self._arefs(runtime, run, outcome))
