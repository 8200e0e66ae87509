"""Deterministic cues in a user's words: a durable statement about them, or a request to act.

The acceptance gate reads them instead of trusting a small memory model's labels where the
words are plain: "I'm a Python backend developer", "My name is Lin", "Please always answer
in Chinese", "I prefer short answers" and "My office address is …" state durable facts
about the user whatever ``authority`` the model gave them; "you may push", "delete the
files" and "Ship B456 to my office address" ask for an action (or grant one), which is
never remembered. Both are judged sentence by sentence; a question states nothing.
The cues are narrow on purpose: a statement they miss keeps the model's own labels.
"""

from __future__ import annotations

import re

_SENTENCE = re.compile(r"[^.!?;。！？；\n]+[.!?;。！？；]*")
"""One sentence with its closing punctuation (a decimal point splits, harmlessly)."""

_QUESTION = re.compile(
    r"[?？]\s*$|^\s*(?:what|which|who|whom|whose|where|when|why|how|is|are|am|do|does|did|"
    r"can|could|would|will|should|shall|have|has)\b|吗[?？。]?\s*$|^\s*(?:什么|哪|谁|为什么|怎么)",
    re.IGNORECASE,
)
"""A question: it ends with a question mark, or opens as one."""

_ENGLISH_FACTS = (
    # who they are: "I'm a Python backend developer" (not "I'm a bit late")
    r"\b(?:i'm|i’m|i\s+am|im)\s+(?:a|an)\s+(?!bit\b|little\b|lot\b|few\b|moment\b)\w",
    r"\bi\s+(?:work|live)\s+(?:as|at|in|for|on|from)\b",
    r"\b(?:i'm|i’m|i\s+am)\s+(?:based|located|working)\s+(?:in|at|as|for)\b",
    r"\b(?:i'm|i’m|i\s+am|i\s+come)\s+from\b",
    r"\b(?:call\s+me|i\s+go\s+by)\b",
    # an attribute of theirs: "My name is Lin", "My office address is …"
    r"\bmy\s+(?:\w+\s+){0,2}(?:name|job|role|title|occupation|profession|address|email|"
    r"phone|number|timezone|time\s+zone|birthday|company|employer|team|pronouns|language|"
    r"stack|editor|location|city|country|hometown)\s+(?:is|are)\b",
    # what they like: "I prefer short answers"
    r"\bi\s+(?:really\s+|much\s+|strongly\s+|usually\s+)?(?:prefer|like|love|enjoy|hate|"
    r"dislike)\b",
    r"\bi\s+(?:don't|do\s+not)\s+like\b",
    # how they want to be answered, as a standing rule: "always answer in Chinese"
    r"\b(?:always|never|from\s+now\s+on|going\s+forward|by\s+default|in\s+(?:the\s+)?future)"
    r"\b[^.!?]*\b(?:answer|reply|replies|respond|write|speak|talk|explain)\w*\b",
)

_CHINESE_FACTS = (
    r"我是(?!说|不是)",
    r"我叫|叫我|我姓|我的名字",
    r"我(?:在|住在)[^，。,]{1,20}(?:工作|上班|住)|我住在",
    r"我的[^，。,]{0,8}(?:名字|地址|工作|职业|邮箱|电话|时区|公司|语言)是",
    r"我(?:更|比较|很|最)?(?:喜欢|偏好|讨厌|不喜欢)",
    r"(?:以后|今后|从现在起|从现在开始|一直|总是|始终|默认)[^，。,]{0,10}(?:回答|回复|交流|解释)",
)

_ACTION_VERBS = (
    r"ship|send|deliver|delete|remove|erase|push|merge|deploy|cancel|refund|return|buy|"
    r"order|purchase|pay|book|run|execute|install|uninstall|commit|create|update|change|"
    r"modify|move|rename|reset|drop|publish|release|email|post|transfer|schedule|restart|"
    r"stop|kill|submit|approve|sign|forward|upload|download|archive|close|revert|roll\s+back"
)

_ENGLISH_ACTIONS = (
    # a grant: "you may push", "go ahead"
    r"\byou\s+(?:may|can|could|are\s+(?:allowed|free|cleared)\s+to|have\s+(?:my\s+)?"
    r"permission\s+to)\s+(?!call\s+me\b)",
    r"\b(?:go\s+ahead|feel\s+free\s+to)\b",
    r"\bi\s+(?:allow|authori[sz]e|approve|permit)\b",
    # a request to act now: "Ship B456 to …", "please delete the files"
    rf"^\s*(?:(?:ok|okay|now|then|and|so|also|please|kindly|just)[,\s]+)*"
    rf"(?:(?:can|could|would|will)\s+you\s+)?(?:please\s+)?(?:{_ACTION_VERBS})\b",
    rf"\bplease\s+(?:{_ACTION_VERBS})\b",
    rf"\bi\s+(?:want|need|would\s+like|'d\s+like)\s+(?:you\s+)?to\s+(?:{_ACTION_VERBS})\b",
)

_CHINESE_ACTIONS = (
    r"帮我|替我|你可以|允许你|可以直接|请?把.{0,20}(?:寄|发|删|取消|推送|退|改|移)",
    r"寄到|发到|寄给|发给|删掉|删除|取消|推送|退款|下单|付款",
)

_FACT = re.compile("|".join((*_ENGLISH_FACTS, *_CHINESE_FACTS)), re.IGNORECASE)
_ACTION = re.compile("|".join((*_ENGLISH_ACTIONS, *_CHINESE_ACTIONS)), re.IGNORECASE)


def _sentences(text: str) -> list[str]:
    return [match.group(0).strip() for match in _SENTENCE.finditer(text) if match.group(0).strip()]


def is_question(sentence: str) -> bool:
    """True when ``sentence`` asks something rather than states it."""
    return _QUESTION.search(sentence) is not None


def states_durable_fact(text: str) -> bool:
    """True when a sentence of ``text`` that is not a question states a durable user fact.

    Args:
        text: The user's words (a quote or a whole message).

    Returns:
        Whether one of its statements matches a durable-fact cue (who the user is, an
        attribute of theirs, what they like, how they want to be answered from now on).

    """
    return any(
        _FACT.search(sentence) is not None and not is_question(sentence)
        for sentence in _sentences(text)
    )


def asks_for_action(text: str) -> bool:
    """True when a sentence of ``text`` grants a permission or asks for an action.

    Args:
        text: The user's words (a quote or a whole message), or a fact's content.

    Returns:
        Whether one of its sentences (questions included: "can you ship it?") matches a
        grant ("you may push", "go ahead") or a request to act ("delete the files",
        "Ship B456 to my office address").

    """
    return any(_ACTION.search(sentence) is not None for sentence in _sentences(text))
