"""A constraint as the ledger keeps it: the clause that carries the marker, and its fold key.

A user message often asks one thing and repeats a standing rule in passing ("第128个问题：
请帮我查一下订单 X128 的物流状态，另外提醒我不要改收货地址。"). The constraint is the clause
with the marker (不要改收货地址), not the whole sentence; and the same rule said with another
order id or question number is the same rule, so its repeats fold into one entry.

**Clauses.** A sentence is cut at clause punctuation (，,；;：:。.!！?？ and the like; a
comma, period or colon between digits, as in 1,200 or 14:30 or $5.00, does not cut). The
kept text is the clause with the marker, widened as far as the marker needs to make sense:
the clauses a comma joins to it before ("I prefer short answers, two sentences at most"),
unless it opens a new thought (另外, 还有, 顺便, 提醒, also, by the way, remember, ...), a
condition before it ("If the parcel is late, never ...", 如果..., 除非...), a marker that
ends its clause ("Do not, under any circumstances, touch ...") with the rest of the
sentence, and a list that goes on after it ("Only use DHL, FedEx or
UPS."). When a clause is cut out, the reminder and politeness words it opens with (另外,
提醒我, 记得, please, remember, ...) are dropped if the rest still carries the marker; a
sentence that is all one constraint is kept whole, as said.

**Fold key.** Two wordings are one constraint when they differ only in case, punctuation,
white space, the reminder and politeness words they open with, identifiers, and plain
numbers. Identifiers are order-like tokens that mix capital letters and digits (X128, A375,
ORD-2026-0042). A number is a **value**, and a different value is a different constraint,
when it is attached to what gives it a meaning:

- a currency or a percentage: $50, US$ 50, ¥500, 500元, 500块, 50 USD, 20%;
- a unit: 3 days, 2 kg, 10 km, 5件, 3天, 2小时;
- a date, a time or a decimal: 2026-09-02, 9月2日, 14:30, 1.5;
- a comparison that bounds it: 不超过500, 低于 3, under 50, at most 4, more than 10;
- an address: 88号, 5楼, 12 Baker Street.

Any other number is a plain number and folds: ordinals and question numbering (第128个问题,
#12, No. 7, 3rd) and counts that only number the message.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from ctxgraph.state.identifiers import is_constraint

_CUT = re.compile(r",(?!\d)|(?<!\d),|\.(?=\s|$)|:(?!//)(?!\d)|(?<!\d):(?!//)|[，；;：。!！?？…\n]+")
"""Clause punctuation: a period before a space or the end; a comma or colon not between
two digits (1,200 and 14:30 are numbers, https:// is an address)."""

_CONDITION = re.compile(
    r"^\W*(?:if|when|whenever|unless|once|before|after|while|until|in\s+case|for|as\s+long\s+as"
    r"|如果|若|假如|要是|当|除非|一旦|只要|在)\b",
    re.IGNORECASE,
)
"""A clause that opens as a condition of the clause after it."""

_NEW_THOUGHT = re.compile(
    r"^\W*(?:also|and|plus|btw|by\s+the\s+way|oh|remember|reminder|please|note|again"
    r"|另外|还有|顺便|提醒|记得|请|再说一次|再次|注意|对了|并且|而且)",
    re.IGNORECASE,
)
"""A clause that opens a new thought: what came before it in the sentence is other business."""

_CONTINUATION = re.compile(
    r"^\W*(?:or|and|nor|but\s+not|not|except|unless|even|including|especially|without"
    r"|或|或者|和|及|以及|也不|也别|更不|尤其|除非|否则|除了|包括|哪怕|即使)",
    re.IGNORECASE,
)
"""A clause that goes on with the one before it (a list, an exception)."""

_COURTESY = re.compile(
    r"^\W*(?:thanks?(?:\s+you)?|thx|ok(?:ay)?|please|cheers|谢谢|多谢|辛苦了|麻烦了|好的)\W*$",
    re.IGNORECASE,
)

FILLER = re.compile(
    r"^(?:(?:please|remember(?:\s+to)?|reminder|again|also|and|just|still|note|as\s+i\s+said"
    r"|记得|还是|请|再次|再说一次|提醒(?:我|你|您|一下)?|注意|另外|还有|也|顺便|麻烦)"
    r"(?![a-z])[\s\W_]*)+",
    re.IGNORECASE,
)
"""Reminder and politeness words a repeated constraint may open with."""

_LEADING = re.compile(r"^[\W_]+")


def _pieces(sentence: str) -> list[str]:
    """The clauses of ``sentence``, each with the punctuation that ends it."""
    ends = [cut.end() for cut in _CUT.finditer(sentence)]
    spans = zip([0, *ends], [*ends, len(sentence)], strict=True)
    return [sentence[a:b] for a, b in spans if sentence[a:b].strip()]


def _words(text: str) -> int:
    """Roughly how many words ``text`` holds (a CJK character counts as one)."""
    return len(re.findall(r"[A-Za-z0-9]+|[\u4e00-\u9fff]", text))


_MARKER_WORDS = re.compile(
    r"\b(?:do\s+not|don['’]t|never|always|must|only)\b|不要|千万|必须|一定要|务必|不能",
    re.IGNORECASE,
)


def _bare_marker(clause: str) -> bool:
    """Whether the clause is little more than its marker ("Do not", "never", 千万不要)."""
    rest = FILLER.sub("", _LEADING.sub("", clause.strip()))
    return _words(_MARKER_WORDS.sub("", rest)) < 2


def _widened(pieces: list[str], at: int) -> tuple[int, int]:
    """The clauses ``pieces[first:last]`` the marker clause ``pieces[at]`` needs."""
    first, last = at, at + 1
    if not _NEW_THOUGHT.match(pieces[at]):  # comma-joined clauses say one thing together
        while first > 0 and pieces[first - 1].rstrip()[-1:] in (",", "，"):
            first -= 1
    if first > 0 and _CONDITION.match(pieces[first - 1]):
        first -= 1
    if _bare_marker(pieces[at]):  # "Do not, under any circumstances, touch ...": the rest
        return first, len(pieces)
    while last < len(pieces) and not is_constraint(pieces[last]):
        piece = pieces[last]
        short_list = _words(piece) <= 3 and not _COURTESY.match(piece)
        if not (_CONTINUATION.match(piece) or (short_list and re.search(r"[A-Za-z]", piece))):
            break
        last += 1
    return first, last


def _trimmed(text: str) -> str:
    """The clause without its opening filler (when the rest still carries the marker)."""
    text = text.strip().rstrip("，,；;：:")
    if not text:
        return text
    rest = FILLER.sub("", _LEADING.sub("", text)).strip()
    return rest if rest and is_constraint(rest) else text


def constraint_clauses(sentence: str) -> list[str]:
    """The constraints a marked sentence states: each marked clause and what it needs.

    A sentence whose every clause is needed comes back whole and verbatim ("Please never
    refund more than $50.00 per order."); otherwise each marked clause comes back on its
    own, trimmed of its opening reminder and politeness words and its closing comma. A
    sentence without a marked clause (the marker spans a cut) comes back whole.
    """
    pieces = _pieces(sentence)
    spans: list[tuple[int, int]] = []
    for at, piece in enumerate(pieces):
        if spans and at < spans[-1][1]:
            continue
        if is_constraint(piece):
            spans.append(_widened(pieces, at))
    if not spans:
        return [sentence.strip()]
    if spans == [(0, len(pieces))]:
        return [sentence.strip()]
    return [_trimmed("".join(pieces[first:last])) for first, last in spans]


_ORDER_ID = re.compile(r"(?<![\w$/.@-])(?=[A-Za-z0-9_-]*[A-Z])(?=[A-Za-z0-9_-]*\d)[A-Za-z][\w-]*")
"""An order-like identifier: a token that opens with a letter and mixes capitals and digits."""

_NUMBER = r"\d+(?:[.,:/-]\d+)*"
_UNITS = (
    r"%|％|percent|元|块|角|分钱|美元|欧元|英镑|日元|港币|人民币|dollars?|euros?|pounds?|yuan"
    r"|rmb|usd|eur|gbp|jpy|cny|hkd|kg|g|mg|lbs?|km|m|cm|mm|mi|miles?|ft|gb|mb|kb|tb|ms"
    r"|seconds?|secs?|s|minutes?|mins?|hours?|hrs?|h|days?|weeks?|months?|years?|items?"
    r"|pcs|units?|公斤|千克|克|斤|两|米|公里|厘米|毫米|天|日|号|小时|钟头|分钟|秒|周|星期|个月"
    r"|月|年|岁|件|箱|瓶|台|张|单元|栋|幢|楼|层|室|弄|点|折"
)
_STREET = r"(?:street|st|road|rd|avenue|ave|lane|ln|boulevard|blvd|drive|dr|way|court|ct|place|pl)"
_VALUE = re.compile(
    rf"(?:us\$|hk\$|a\$|c\$|[$€£¥￥₹₩]|\b(?:usd|eur|gbp|jpy|cny|rmb|hkd)\b)\s?{_NUMBER}"
    rf"|{_NUMBER}\s?(?:{_UNITS})(?![a-z])"
    rf"|(?:超过|不超过|低于|高于|少于|多于|不少于|不多于|至少|最多|至多|不低于|不高于|大于|小于"
    rf"|more\s+than|less\s+than|fewer\s+than|under|over|above|below|at\s+most|at\s+least|up\s+to"
    rf"|max(?:imum)?|min(?:imum)?|within|exceed(?:s|ing)?|beyond)\s*{_NUMBER}"
    rf"|{_NUMBER}\s*(?:以内|以下|以上|之内)"
    rf"|\d+(?:[.:/-]\d+)+"
    rf"|\d+\w*\s+(?:[a-z]+\s+){{0,3}}{_STREET}\b",
    re.IGNORECASE,
)
"""A number attached to what makes it a value (see the module doc)."""

_DIGITS = re.compile(r"(?<![A-Za-z0-9_-])\d+(?:st|nd|rd|th)?(?![A-Za-z0-9_-])")
"""A number on its own (an ordinal too); digits inside a name (prod-db-7, v2) are letters."""


def _generalized(text: str) -> str:
    """``text`` with identifiers and plain numbers as ``#``, values kept as they are."""
    text = _ORDER_ID.sub("#", text)
    parts: list[str] = []
    last = 0
    for value in _VALUE.finditer(text):
        parts.append(_DIGITS.sub("#", text[last : value.start()]))
        parts.append(value.group(0))
        last = value.end()
    parts.append(_DIGITS.sub("#", text[last:]))
    return "".join(parts)


@lru_cache(maxsize=4_096)
def wording_key(text: str) -> str:
    """What two wordings of one sentence share: case, punctuation, fillers and spaces aside.

    The NFKC-normalized, case-folded text without leading reminder or politeness words,
    punctuation and white space; any other letter, digit or symbol counts. Memoized:
    records read the same texts again.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    folded = FILLER.sub("", _LEADING.sub("", folded))
    key = "".join(c for c in folded if not c.isspace() and not _is_punctuation(c))
    return key or folded.strip()


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


@lru_cache(maxsize=4_096)
def constraint_key(text: str) -> str:
    """What the repeats of one constraint share; equal keys mean the same constraint.

    ``wording_key`` of the text with identifiers and plain numbers folded (see the module
    doc): "第3个问题不要改收货地址" and "第7个问题：不要改收货地址！" share a key, and so do "Do
    not change X128" and "do not change A375"; "不要超过500元" and "不要超过800元", "under $50"
    and "under $80", "寄到88号" and "寄到99号" do not.
    """
    return wording_key(_generalized(unicodedata.normalize("NFKC", text)))
