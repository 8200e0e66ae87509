"""What a user's sentence is to the ledger: a constraint, a decision, or neither.

The ledger keeps two kinds of user sentences verbatim. A **constraint** carries an explicit
marker (never, always, only, at most, 不要, 必须, ...) and holds for the whole session. A
**decision** settles one named item: an instruction with an action (ship, cancel, wait,
use, choose, send, keep, hold, deliver, ...; 发货, 寄到, 取消, 等, 用, 选, ...) and a target
(an identifier such as B456, a path, an order or file, a name), such as "Ship B456 to my
office address, not to my home.", or a sentence marked as one ("Decision: we use Redis
Streams instead of Kafka."). Neither is a **question** ("Is C789 eligible for a return?",
"What should you never do without asking me?": a question mark, half- or full-width, or
an interrogative opening) nor a **retraction** ("Never mind F678.", 算了).

Decisions get a block of their own (``USER DECISIONS``), not a place among the
constraints, for two reasons. What they say differs: a constraint binds every later
action, a decision one item, and a model that reads "Ship B456 to my office" as a
standing rule would apply it to other orders. And their budget must not eat into the
constraints': each block is bounded by the same rule (the newest kept within the
constraint budget, older ones counted as archived), so the existing constraint budget
holds as it did.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

from ctxgraph.state.identifiers import extract_identifiers, is_constraint

SentenceKind = Literal["constraint", "decision"]

_LEAD = (
    r"^[\s\W_]*(?:(?:so|and|but|also|ok(?:ay)?|hey|hi|well|then|now|just|actually|instead"
    r"|alright|right|fine|good|great|thanks|please|kindly|remember(?:\s+to)?|reminder|again"
    r"|as\s+i\s+said|note)\b[\s,;:!.-]*)*"
)
"""Filler a sentence may open with before its first real word."""

_INTERROGATIVE = re.compile(
    _LEAD + r"(?:what|which|who|whom|whose|when|where|why|how|is|are|am|was|were|can|could"
    r"|will|would|should|shall|may|might|does|did|isn['’]t|aren['’]t|wasn['’]t|weren['’]t"
    r"|can['’]t|couldn['’]t|won['’]t|wouldn['’]t|shouldn['’]t|doesn['’]t|didn['’]t"
    r"|do(?!\s+not\b))\b",
    re.IGNORECASE,
)
_CHINESE_PARTICLE = re.compile(r"[吗呢][\s。.!！]*$")
_CHINESE_QUESTION_WORD = re.compile(
    r"什么|为什么|为何|怎么|怎样|如何|哪|是否|能否|多少|几时|何时|能不能|可不可以|会不会"
    r"|是不是|有没有|要不要"
)


def is_question(sentence: str) -> bool:
    """A question: it ends with ``?`` or ``？``, or opens as one, or asks in Chinese.

    An English interrogative opening is a question word or an auxiliary ("Is C789 ...",
    "Can you ...", "Do you ..." but not "Do not ..."). A Chinese sentence asks when it
    ends with 吗 or 呢, or holds a question word (什么, 为什么, 哪, 是否, ...) without
    ending as a statement (。or ！): "不要问我为什么。" is a constraint.
    """
    text = sentence.strip()
    if text.endswith(("?", "？")) or _INTERROGATIVE.match(text):
        return True
    if _CHINESE_PARTICLE.search(text):
        return True
    return bool(_CHINESE_QUESTION_WORD.search(text)) and not text.endswith(("。", "！", "!"))


_RETRACTION = re.compile(
    _LEAD + r"(?:never\s*mind|nevermind|forget\s+(?:about\s+)?(?:it|that|this|[A-Z]\w*\d)"
    r"|scratch\s+that|ignore\s+(?:that|this|my\s+last)|disregard)\b"
    r"|^[\s\W_]*(?:算了|不用了|没事了|别管|忽略)",
    re.IGNORECASE,
)


def is_retraction(sentence: str) -> bool:
    """A retraction: "Never mind F678.", "forget it", "scratch that", 算了, 不用了."""
    return bool(_RETRACTION.match(sentence.strip()))


_ACTIONS = (
    r"ship|send|deliver|cancel|hold|keep|wait|use|choose|pick|select|switch|go\s+with|return"
    r"|refund|redirect|reroute|forward|pause|resume|proceed\s+with|approve|reject|book"
    r"|schedule|upgrade|downgrade|replace|exchange|move|change"
)
_DIRECTIVE = re.compile(
    _LEAD + r"(?:let['’]?s\s+|(?:i|we)\s*(?:will|shall|['’]ll|(?:have\s+)?decided\s+to"
    r"|want(?:\s+you)?\s+to|would\s+like(?:\s+you)?\s+to|['’]d\s+like(?:\s+you)?\s+to"
    r"|need\s+you\s+to|prefer\s+to|choose\s+to|am\s+going\s+to|are\s+going\s+to)\s+)?"
    rf"(?P<action>{_ACTIONS})\b(?!\s*[,!])",
    re.IGNORECASE,
)
"""An instruction's opening: the action, bare or after "let's", "I want you to", "we'll"
("Wait, ..." is an interjection, not an instruction)."""

_FIRST_PERSON = re.compile(rf"\b(?:i|we)\s+(?P<action>{_ACTIONS})\b", re.IGNORECASE)
_CHOICE = re.compile(r"\b(?:instead\s+of|rather\s+than|not)\b", re.IGNORECASE)
_MARKED = re.compile(
    r"^[\s\W_]*(?:decision|decided|final\s+answer)\s*[:：]|\b(?:i|we)(?:['’]ve|\s+have)?\s+"
    r"decided\b|\b(?:let['’]?s|we['’]ll|we\s+will)\s+go\s+with\b"
    r"|(?<![没未])决定|就用|就选|选定|定了",
    re.IGNORECASE,
)
_CHINESE_ACTION = re.compile(
    r"发货|寄|送到|送去|取消|(?<![平同相])等(?![级于])|使用|(?<![费作信有应使专通])用(?![户途品处])"
    r"|选择|(?<!候)选(?!项)|保留|留着|退货|退款|换成|改成|改为|暂停|发送|发给|交付|扣留"
)
_CHINESE_DONE = re.compile(r"已")
"""已 ("already"): a report of what happened, not an instruction."""
_ITEM = re.compile(
    r"\b(?:order|package|parcel|shipment|item|file|branch|ticket|invoice|delivery|box"
    r"|version|plan|option)s?\b|订单|包裹|快递|文件|货|版本|方案",
    re.IGNORECASE,
)
_NAME = re.compile(r"(?<=[\s(])(?:[A-Z][a-z0-9][\w.-]*|[A-Z]{2,})|[`\"“'‘][^`\"”'’]{1,60}[`\"”'’]")


def _has_target(text: str) -> bool:
    """Whether ``text`` names an item: an identifier, an order or file, a name or a quote."""
    return bool(extract_identifiers(text) or _ITEM.search(text) or _NAME.search(" " + text))


def is_decision(sentence: str) -> bool:
    """A decision about a named item (see the module doc); questions and retractions are not.

    English: a sentence marked as a decision, an instruction that opens with an action
    ("Ship B456 ...", "Please cancel order C789", "We'll use Redis") with a target after
    it, or a first-person choice of a target over another ("we use X instead of Y").
    Chinese: an action word (发货, 寄到, 取消, 等, 用, 选, ...) with an identifier, an
    order or a file in the sentence.
    """
    text = sentence.strip()
    if not text or is_question(text) or is_retraction(text):
        return False
    if _MARKED.search(text):
        return True
    english = _english_decision(text)
    if english is not None:
        return english
    if _CHINESE_ACTION.search(text) and not _CHINESE_DONE.search(text):
        return bool(extract_identifiers(text) or _ITEM.search(text))
    return False


def _english_decision(text: str) -> bool | None:
    """For an English instruction or choice, whether it has a target; None for neither."""
    directive = _DIRECTIVE.match(text)
    if directive is not None:
        return _has_target(text[directive.end("action") :])
    choice = _FIRST_PERSON.search(text)
    if choice is not None and _CHOICE.search(text, choice.end()):
        return _has_target(text[choice.end() :])
    return None


@lru_cache(maxsize=4_096)
def sentence_kind(sentence: str) -> SentenceKind | None:
    """What the ledger keeps ``sentence`` as: a constraint, a decision, or nothing.

    Questions and retractions are neither, even with a marker ("What should you never
    do?", "Never mind F678."); a sentence with a constraint marker is a constraint.
    Memoized: every estimate and compaction derives the folded turns' ledger again.
    """
    if is_question(sentence) or is_retraction(sentence):
        return None
    if is_constraint(sentence):
        return "constraint"
    return "decision" if is_decision(sentence) else None
