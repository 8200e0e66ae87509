"""The offline demo: a rule-based scripted model and the one tool it uses."""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool

from graph.scripted_model import ScriptedChatModel
from state.models import Models

_ARITHMETIC = re.compile(r"(\d+(?:\.\d+)?(?:\s*[-+*/]\s*\d+(?:\.\d+)?)+)")
_RECALL = re.compile(r"\b(what did i|remind me|earlier|before)\b", re.IGNORECASE)

_OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError(f"only + - * / on numbers are supported, got {ast.dump(node)}")


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and return the result."""
    value = _evaluate(ast.parse(expression, mode="eval"))
    return str(int(value)) if value.is_integer() else f"{value:g}"


def _text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else message.text


def demo_reply(messages: list[BaseMessage]) -> AIMessage:
    """Answer deterministically: arithmetic goes through the calculator, recall reads history."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(content=f"The calculator says {_text(last)}.")
    users = [m for m in messages if isinstance(m, HumanMessage)]
    said = _text(users[-1]) if users else ""
    expression = _ARITHMETIC.search(said)
    if expression:
        call_id = f"call_demo_{len(messages)}"
        return AIMessage(
            content="",
            tool_calls=[
                {"name": "calculator", "args": {"expression": expression.group(1)}, "id": call_id}
            ],
        )
    if _RECALL.search(said):
        earlier = [_text(m) for m in users[:-1]]
        listed = "; ".join(f'"{text}"' for text in earlier) or "nothing yet"
        return AIMessage(content=f"Earlier in this thread you said: {listed}.")
    return AIMessage(content=f"Noted: {said}")


def demo_tools() -> tuple[BaseTool, ...]:
    """The tools the demo model knows how to call."""
    return (calculator,)


def demo_models() -> Models:
    """Models for every role backed by the deterministic demo responder."""
    return Models(main=ScriptedChatModel(responder=demo_reply))
