"""What the memory model sees of a turn: the user's own words and the assistant's answers."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping, Sequence

from langchain_core.messages import AIMessage, BaseMessage

from ctxgraph.state.messages import content_text, is_real_user_message, message_origin

USER = "user"
ASSISTANT = "assistant"

_UPLOADS_BLOCK = re.compile(
    r"<current_uploads\b[^>]*>.*?</current_uploads\s*>", re.IGNORECASE | re.DOTALL
)
_UPLOADS_UNCLOSED = re.compile(r"<current_uploads\b.*\Z", re.IGNORECASE | re.DOTALL)
_BLANK_LINES = re.compile(r"\n\s*\n\s*\n+")

_CHINESE_ACKS = (
    "你好", "您好", "你们好", "大家好", "哈喽", "嗨", "早上好", "早安", "中午好", "下午好",
    "晚上好", "好的", "好滴", "好嘞", "好吧", "好", "嗯", "哦", "噢", "谢谢", "谢谢你",
    "谢谢您", "谢啦", "多谢", "感谢", "非常感谢", "收到", "明白", "明白了", "知道了", "了解",
    "行", "可以", "没问题", "辛苦了", "呀", "啊", "啦", "哈",
)  # fmt: skip
_ENGLISH_ACKS = (
    "hi", "hi there", "hello", "hello there", "hey", "hey there", "hiya", "good morning",
    "good afternoon", "good evening", "ok", "okay", "okey", "thanks", "thanks a lot",
    "thanks so much", "many thanks", "thank you", "thank you so much", "thank you very much",
    "thx", "ty", "cheers", "got it", "sure", "cool", "great", "nice", "perfect", "awesome",
    "alright", "all right", "sounds good", "understood", "noted",
)  # fmt: skip
_SEPARATOR = (
    "[\\s" + re.escape(string.punctuation) + "，。！？、；：…～·—“”‘’「」『』（）【】《》〜]"
)


def _ack_pattern() -> re.Pattern[str]:
    english = [
        r"(?<![a-z])" + r"\s+".join(map(re.escape, phrase.split())) + r"(?![a-z])"
        for phrase in _ENGLISH_ACKS
    ]
    chinese = [re.escape(phrase) for phrase in _CHINESE_ACKS]
    words = sorted([*english, *chinese], key=len, reverse=True)
    word = "(?:" + "|".join(words) + ")"
    return re.compile(f"{_SEPARATOR}*{word}(?:{_SEPARATOR}*{word})*{_SEPARATOR}*", re.IGNORECASE)


_ACK_ONLY = _ack_pattern()
_ACK_MAX_CHARS = 200
"""Messages longer than this are never taken for a bare greeting or acknowledgement."""


def strip_uploads(text: str) -> str:
    """Remove ``<current_uploads>`` blocks (an unclosed one runs to the end) and trim."""
    text = _UPLOADS_BLOCK.sub("", text)
    text = _UPLOADS_UNCLOSED.sub("", text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def is_ack_only(text: str) -> bool:
    """True when the whole message is only greetings/acknowledgements and punctuation."""
    text = text.strip()
    if not text or len(text) > _ACK_MAX_CHARS:
        return False
    return _ACK_ONLY.fullmatch(text) is not None


def _is_final_answer(message: BaseMessage) -> bool:
    return (
        isinstance(message, AIMessage)
        and not message.tool_calls
        and not message.invalid_tool_calls
        and message_origin(message) is None
    )


def _answered_by_application(messages: Sequence[BaseMessage], index: int) -> bool:
    """True when the message after ``index`` is an injected (origin-marked) answer."""
    following = messages[index + 1] if index + 1 < len(messages) else None
    return isinstance(following, AIMessage) and message_origin(following) is not None


def filter_for_memory(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """Rows ``{"id", "role", "content"}`` of what the user said and the assistant answered.

    Kept: real user messages (no origin mark) and final assistant text replies (no tool
    calls, non-empty text), with ``<current_uploads>`` blocks stripped. Dropped: tool calls
    and results, system messages, anything injected (an origin mark), messages empty after
    stripping, user messages that are only a greeting or acknowledgement, user messages
    answered without a model (an unknown ``/skill``: the next message is an injected
    answer), and the assistant replies to a dropped user message (up to the next user
    message). A message without an id gets ``#<index>`` (its position in ``messages``) as
    its row id.
    """
    rows: list[dict[str, str]] = []
    answering_dropped = False
    for index, message in enumerate(messages):
        if is_real_user_message(message):
            text = strip_uploads(content_text(message))
            answering_dropped = (
                not text or is_ack_only(text) or _answered_by_application(messages, index)
            )
            if answering_dropped:
                continue
            role = USER
        elif _is_final_answer(message):
            if answering_dropped:
                continue
            text = strip_uploads(content_text(message))
            if not text:
                continue
            role = ASSISTANT
        else:
            continue
        row_id = message.id if message.id else f"#{index}"
        rows.append({"id": row_id, "role": role, "content": text})
    return rows


def has_user_rows(rows: Iterable[Mapping[str, str]]) -> bool:
    """True if any row is the user's; with none, the memory model need not be called."""
    return any(row.get("role") == USER for row in rows)


def render_rows(rows: Iterable[Mapping[str, str]]) -> str:
    """A compact transcript, one ``[id] role: text`` line per row (whitespace collapsed)."""
    return "\n".join(
        f"[{row['id']}] {row['role']}: {' '.join(row['content'].split())}" for row in rows
    )
