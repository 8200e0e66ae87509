"""The offline demo model's rules: deterministic replies for each role, and its calculator.

``state.demo_model`` puts these replies into ``Models`` (``demo_models``), and
``Models.from_env`` selects them for ``CTXGRAPH_MODEL=scripted``; this module imports
neither, so both can import it. The replies read only the prompts' data blocks
(``<folded_messages>``, ``<new_conversation>``, the skill listing and the skills data
message, ...), never the modules that write them.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, tool

from ctxgraph.state.messages import content_text, message_origin
from ctxgraph.state.scripted_model import ScriptedChatModel

__all__ = [
    "LEDGER_COMMAND",
    "calculator",
    "demo_chat_reply",
    "demo_memory",
    "demo_role_models",
    "demo_summary",
    "demo_tools",
]

LEDGER_COMMAND = "ctxgraph threads show <thread> --summary"
"""The command that prints a thread's current summary together with its ledger."""

NOTE_CHARS = 80
"""Longest echo of a user message in the demo's plain acknowledgement."""

_ARITHMETIC = re.compile(
    r"\b(?:what is|what's|compute|calculate)\s+(\d+(?:\.\d+)?(?:\s*[-+*/]\s*\d+(?:\.\d+)?)+)",
    re.IGNORECASE,
)
_MEMORY_QUESTION = re.compile(
    r"\bwhat do you (?:remember|know) about me\b|你记得我什么", re.IGNORECASE
)
_RECALL = re.compile(r"\b(what did i (?:say|tell you)|remind me)\b", re.IGNORECASE)
_DELEGATE = re.compile(
    r"^ask the (?P<kind>[a-z0-9][a-z0-9_-]*) (?:subagent )?to (?P<task>\S.*)$",
    re.IGNORECASE | re.DOTALL,
)
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")

_SKILL_NAME = r"[a-z0-9]+(?:-[a-z0-9]+)*"
_LISTING = re.compile(r"^Skills you can use \((?P<kind>names only|name: description)", re.MULTILINE)
_LISTED = re.compile(rf"^- (?P<name>{_SKILL_NAME}): ", re.MULTILINE)
_ACTIVE_HEADER = "Active skills of this thread"
_ACTIVE = re.compile(rf"^- (?P<name>{_SKILL_NAME}): ref ", re.MULTILINE)
_SLASH_SKILL = re.compile(
    rf"^The user activated the skill (?P<name>{_SKILL_NAME}) with /", re.MULTILINE
)
_LOADED = re.compile(rf"^Skill (?P<name>{_SKILL_NAME}) loaded \(ref ")
_STEP = re.compile(r"^(?:\d+[.)]|[-*])\s+(?P<step>\S.*)$")

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


def _calculate(expression: str) -> str:
    value = _evaluate(ast.parse(expression, mode="eval"))
    return str(int(value)) if value.is_integer() else f"{value:g}"


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and return the result."""
    return _calculate(expression)


def _block(text: str, tag: str) -> str:
    match = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    return match.group(1).strip() if match else ""


def _section(text: str, title: str, following: str | None) -> str:
    end = rf"\n{following}\n" if following else r"$"
    match = re.search(rf"^{title}\n(.*?){end}", text, re.DOTALL | re.MULTILINE)
    return match.group(1).strip() if match else ""


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _count(number: int, noun: str) -> str:
    """``1 tool call``, ``2 tool calls``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def demo_summary(prompt: str) -> AIMessage:
    """A deterministic four-section summary built from the summary prompt's data blocks."""
    previous = _block(prompt, "previous_summary")
    folded = _block(prompt, "folded_messages").splitlines()
    request = _block(prompt, "current_request")
    said = [line.removeprefix("human: ") for line in folded if line.startswith("human: ")]
    calls = [line for line in folded if line.startswith("assistant called ")]
    first = (said[0] if said else request).split(". ")[0]
    intent = _section(previous, "SESSION INTENT", "SUMMARY") or _short(first, 120)
    earlier = _section(previous, "SUMMARY", "ARTIFACTS").splitlines()
    latest = (
        f"Folded {_count(len(folded), 'line')}: {_count(len(said), 'user turn')}, "
        f"{_count(len(calls), 'tool call')}."
    )
    if said:
        latest += f" The user last said: {_short(said[-1], 80)}"
    lines = [*earlier, latest][-6:]
    body = "\n".join(lines)
    return AIMessage(
        content=f"SESSION INTENT\n{intent}\nSUMMARY\n{body}\n"
        "ARTIFACTS\nSee the ledger below for exact identifiers, constraints and tool-call "
        f"states (`{LEDGER_COMMAND}` prints both).\n"
        f"NEXT STEPS\nAnswer the current request: {request or 'none'}"
    )


def _summary_intent(messages: list[BaseMessage]) -> str:
    """The SESSION INTENT of an injected summary message, if the request carries one."""
    for message in messages:
        if message_origin(message) == "summary":
            return _section(content_text(message), "SESSION INTENT", "SUMMARY")
    return ""


_ROW = re.compile(r"^\[(?P<id>[^\]]+)\] user: (?P<text>.*)$", re.MULTILINE)
_DURABLE = re.compile(
    r"\b(?:I (?:mainly|usually|always|prefer|work)|my (?:name|job|role) is)\b"
    r"|我主要|我平时|平时请用|我偏好",
    re.IGNORECASE,
)


def demo_memory(prompt: str) -> AIMessage:
    """A deterministic extraction: durable self-descriptions in the new conversation."""
    facts: list[dict[str, object]] = []
    for row in _ROW.finditer(_block(prompt, "new_conversation")):
        for sentence in re.split(r"(?<=[.!?。！？])\s*", row.group("text")):
            if not sentence or not _DURABLE.search(sentence):
                continue
            words = re.findall(r"[a-z]+", sentence.lower())[1:4] or ["note", str(len(facts))]
            facts.append(
                {
                    "key": "_".join(words),
                    "content": sentence,
                    "category": "preference" if "prefer" in sentence.lower() else "context",
                    "scope": "user",
                    "durability": "durable",
                    "authority": "descriptive",
                    "confidence": 0.8,
                    "evidence_message_id": row.group("id"),
                    "evidence_text": sentence,
                }
            )
    update = {"facts": facts, "profile_updates": []}
    call = {"name": "MemoryUpdate", "args": update, "id": f"call_memory_{len(facts)}"}
    return AIMessage(content="", tool_calls=[call])


def _note(said: str) -> str:
    """A plain acknowledgement; a long message is echoed by its first sentence only."""
    if len(said) <= NOTE_CHARS:
        return f"Noted: {said}"
    first = _SENTENCE_END.split(said.strip(), maxsplit=1)[0]
    return f"Noted: {_short(first, NOTE_CHARS)}"


def _can_call(name: str, tools: Collection[str] | None) -> bool:
    """Whether the tool ``name`` is bound (``tools`` None: the caller did not say, so yes)."""
    return tools is None or name in tools


def _worked_out(expression: str) -> str:
    """The text answer to arithmetic when no calculator is bound."""
    try:
        value = _calculate(expression)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return f"I cannot work out {expression}: no calculator tool is bound."
    return f"{expression} = {value} (no calculator tool is bound, so I worked it out myself)."


def demo_chat_reply(messages: list[BaseMessage], tools: Collection[str] | None = None) -> AIMessage:
    """Answer deterministically: arithmetic goes through the calculator, recall reads history.

    With skills listed, a message naming one (``Use the packing-list skill``) loads it
    with ``load_skill``; a ``/name`` activation is acknowledged in the final answer, and a
    recall answer names the thread's active skills. ``Ask the researcher to ...`` hands
    the rest to the ``researcher`` subagent with ``task``.

    ``tools`` are the names of the tools bound for the call (None: any of these). A tool
    that is not bound is never called: arithmetic is answered in text, and a delegation
    or a named skill is treated as an ordinary message.
    """
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(content=_after_tool(last, messages))
    turn = _Turn.of(messages)
    for rule in _CALL_RULES:
        reply = rule(turn, tools)
        if reply is not None:
            return reply
    return AIMessage(content=_text_answer(turn))


@dataclass(frozen=True)
class _Turn:
    """A request as the chat rules read it: the user's own messages and a tool-call id."""

    messages: list[BaseMessage]
    users: list[HumanMessage]
    """The user's messages, without data messages (summary, memory, skills)."""
    said: str
    """The text of the last of ``users``; empty without one."""
    call_id: str

    @classmethod
    def of(cls, messages: list[BaseMessage]) -> _Turn:
        users = [m for m in messages if isinstance(m, HumanMessage) and not message_origin(m)]
        said = content_text(users[-1]) if users else ""
        # Unique per user message (its id is a fresh UUID), stable when replayed.
        call_id = f"call_{((users[-1].id if users else None) or str(len(messages)))[:8]}"
        return cls(messages, users, said, call_id)

    def call(self, name: str, args: dict[str, object]) -> AIMessage:
        """An answer that calls the tool ``name`` with ``args``."""
        return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": self.call_id}])


def _arithmetic(turn: _Turn, tools: Collection[str] | None) -> AIMessage | None:
    """A calculator call for arithmetic, or the worked-out answer without a calculator."""
    expression = _ARITHMETIC.search(turn.said)
    if expression is None:
        return None
    if not _can_call(calculator.name, tools):
        return AIMessage(content=_worked_out(expression.group(1)))
    return turn.call("calculator", {"expression": expression.group(1)})


def _delegation(turn: _Turn, tools: Collection[str] | None) -> AIMessage | None:
    """A ``task`` call for ``Ask the <kind> to <task>``, when ``task`` is bound."""
    delegated = _DELEGATE.match(turn.said.strip())
    if delegated is None or not _can_call("task", tools):
        return None
    args: dict[str, object] = {
        "description": delegated["task"],
        "subagent_type": delegated["kind"].lower(),
    }
    return turn.call("task", args)


def _skill_load(turn: _Turn, tools: Collection[str] | None) -> AIMessage | None:
    """A ``load_skill`` call for a listed skill the user names, when it is bound."""
    named = _named_skill(turn.said, _listed_skills(turn.messages), _slash_skill(turn.messages))
    if named is None or not _can_call("load_skill", tools):
        return None
    return turn.call("load_skill", {"name": named})


_CALL_RULES: tuple[Callable[[_Turn, Collection[str] | None], AIMessage | None], ...] = (
    _arithmetic,
    _delegation,
    _skill_load,
)
"""The rules that may answer with a tool call, first match wins; else a text answer."""


def _text_answer(turn: _Turn) -> str:
    """What the memory view holds, a recall of the thread, or an acknowledgement."""
    if _MEMORY_QUESTION.search(turn.said):
        return _remembered(turn.messages)
    if _RECALL.search(turn.said):
        return _recall(turn)
    return _note(turn.said)


def _recall(turn: _Turn) -> str:
    """The summary's intent, the user's earlier messages and the active skills."""
    earlier = [content_text(m) for m in turn.users[:-1]]
    intent = _summary_intent(turn.messages)
    parts = [f"From the summary of older turns: {intent}."] if intent else []
    if earlier or not intent:
        listed = "; ".join(f'"{text}"' for text in earlier) or "nothing yet"
        parts.append(f"Earlier in this thread you said: {listed}.")
    active = _active_skills(turn.messages)
    if active:
        parts.append(f"Active skills: {', '.join(active)}.")
    return " ".join(parts)


def _after_tool(result: ToolMessage, messages: list[BaseMessage]) -> str:
    """The answer to a tool result: a loaded skill's first step, or the calculator's value."""
    text = content_text(result)
    if result.name == "load_skill":
        return _loaded_answer(text)
    if result.name == "task":
        report = text.split("\n\n[subagent ", 1)[0]
        return f"The subagent reported: {_short(report, 200)}"
    answer = f"The calculator says {text}."
    slash = _slash_skill(messages)
    if slash is not None:
        answer += f" I followed the {slash} skill you activated with /{slash}."
    return answer


def _loaded_answer(text: str) -> str:
    """A short line quoting the first step of a ``load_skill`` result's body."""
    loaded = _LOADED.match(text)
    if loaded is None:
        return f"The skill could not be loaded: {_short(text, NOTE_CHARS)}"
    name = loaded.group("name")
    step = _first_step(text.split("\n\n", 1)[1] if "\n\n" in text else "")
    if not step:
        return f"I loaded the {name} skill and will follow it."
    return f'I loaded the {name} skill and will follow it. Its first step: "{step}"'


def _first_step(body: str) -> str:
    """The first list item of ``body`` (its indented continuation lines joined), else ""."""
    lines = body.splitlines()
    for index, line in enumerate(lines):
        match = _STEP.match(line)
        if match is None:
            continue
        parts = [match.group("step").strip()]
        for following in lines[index + 1 :]:
            if not following.startswith((" ", "\t")) or not following.strip():
                break
            parts.append(following.strip())
        return " ".join(parts)
    return ""


def _skill_messages(messages: list[BaseMessage]) -> list[str]:
    """The texts of the skills data messages of the request."""
    return [content_text(m) for m in messages if message_origin(m) == "skills"]


def _slash_skill(messages: list[BaseMessage]) -> str | None:
    """The skill the user activated with ``/name`` for this turn, if any."""
    for text in _skill_messages(messages):
        match = _SLASH_SKILL.search(text)
        if match:
            return match.group("name")
    return None


def _active_skills(messages: list[BaseMessage]) -> list[str]:
    """The active skills the request's reminder names, in its order (most recent last)."""
    for text in _skill_messages(messages):
        if text.startswith(_ACTIVE_HEADER):
            reminder = text.split("\n\n", 1)[0]
            return [match.group("name") for match in _ACTIVE.finditer(reminder)]
    return []


def _listed_skills(messages: list[BaseMessage]) -> list[str]:
    """The skill names listed at the end of the system message."""
    system = next((m for m in messages if isinstance(m, SystemMessage)), None)
    text = content_text(system) if system is not None else ""
    header = _LISTING.search(text)
    if header is None:
        return []
    rest = text[header.end() :]
    if header.group("kind") == "name: description":
        return [match.group("name") for match in _LISTED.finditer(rest)]
    lines = rest.split("\n")
    names = lines[1] if len(lines) > 1 else ""
    return [name.strip() for name in names.split(",") if re.fullmatch(_SKILL_NAME, name.strip())]


def _named_skill(said: str, listed: list[str], slash: str | None) -> str | None:
    """The first listed skill ``said`` names as a word (not the turn's ``/name`` skill)."""
    found: list[tuple[int, str]] = []
    for name in listed:
        if name == slash:
            continue
        match = re.search(rf"(?<![\w/-]){re.escape(name)}(?![\w-])", said)
        if match:
            found.append((match.start(), name))
    return min(found)[1] if found else None


def _remembered(messages: list[BaseMessage]) -> str:
    """The facts of the injected memory view, as the demo's answer."""
    views = [content_text(m) for m in messages if message_origin(m) == "memory"]
    facts = [line[2:] for view in views for line in view.splitlines() if line.startswith("- ")]
    if not facts:
        return "I do not remember anything about you yet."
    return "From long-term memory: " + " ".join(facts)


def _prompt(messages: list[BaseMessage]) -> str:
    """The text of a request's last message: the prompt of a summary or extraction call."""
    return content_text(messages[-1]) if messages else ""


def demo_tools() -> tuple[BaseTool, ...]:
    """The tools the demo model knows how to call."""
    return (calculator,)


def demo_role_models() -> tuple[ScriptedChatModel, ScriptedChatModel, ScriptedChatModel]:
    """The demo model for the main, summary and memory roles, in that order.

    Each role replies by rule. The main model calls only the tools bound to it
    (``bind_tools``): with a tool list that lacks ``calculator``, arithmetic is answered
    in text.
    """
    return (
        ScriptedChatModel(tool_responder=demo_chat_reply),
        ScriptedChatModel(responder=lambda messages: demo_summary(_prompt(messages))),
        ScriptedChatModel(responder=lambda messages: demo_memory(_prompt(messages))),
    )
