"""The ``task`` tool: its schema (which the model sees) and the check of a call's arguments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ctxgraph.state.subagents import SubagentSpec

TASK_TOOL = "task"

TASK_DESCRIPTION = (
    "Hand self-contained work to a subagent. It sees only `description` and "
    "`expected_output`, none of this conversation, so say all it needs. You get its answer, "
    "cut, with refs to the full answer and transcript (read_artifact reads them). Calls in "
    "one answer run in parallel.\n\nSubagent types:\n"
)


class TaskArguments(BaseModel):
    """The arguments of one ``task`` call; unknown ones are refused."""

    model_config = ConfigDict(extra="forbid")

    description: str = Field(
        min_length=1,
        description="The whole task: goal, inputs, identifiers, constraints.",
    )
    subagent_type: str = Field(min_length=1, description="A type listed above.")
    expected_output: str | None = Field(default=None, description="What to answer, in what form.")


def _not_run_here(**_: Any) -> str:
    raise RuntimeError("task calls are run by the subagent node, not by the tools node")


def task_tool(specs: Sequence[SubagentSpec]) -> BaseTool:
    """The ``task`` tool whose description lists ``specs`` (name and when to use each)."""
    lines = "\n".join(f"- {spec.name}: {spec.description.strip()}" for spec in specs)
    return StructuredTool.from_function(
        func=_not_run_here,
        name=TASK_TOOL,
        description=TASK_DESCRIPTION + lines,
        args_schema=TaskArguments,
    )


def parse_task_arguments(args: Mapping[str, Any]) -> TaskArguments | str:
    """The call's arguments, or a message naming each problem."""
    try:
        return TaskArguments.model_validate(dict(args))
    except ValidationError as error:
        problems = []
        for item in error.errors():
            where = ".".join(str(part) for part in item["loc"]) or "arguments"
            if item["type"] == "extra_forbidden":
                problems.append(f"unknown argument {where!r}")
            elif item["type"] == "missing":
                problems.append(f"missing argument {where!r}")
            else:
                problems.append(f"{where}: {item['msg']}")
        return (
            "invalid task arguments: " + "; ".join(problems) + ". task takes description "
            "(str), subagent_type (str) and optionally expected_output (str)."
        )


def task_text(arguments: TaskArguments) -> str:
    """The child's user message: the description, then the expected output if given."""
    if not arguments.expected_output:
        return arguments.description
    return f"{arguments.description}\n\nExpected output:\n{arguments.expected_output}"
