"""Text side of the ledger: identifiers, sentences, constraint markers and outcome claims."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Literal

_TRAILING_PUNCTUATION = ".,;:!?)]}>'\"`。，；：！？）】」』、…"

_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_CODES = r"(?:USD|EUR|GBP|JPY|CNY|RMB|CHF|CAD|AUD|HKD|SGD|INR|KRW|NZD|SEK|NOK|DKK|MXN|BRL)"
_SIGNS = r"(?:US\$|HK\$|A\$|C\$|[$€£¥￥₹₩])"
_CN_UNITS = r"(?:美元|欧元|英镑|日元|元)"
_MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"
_ISO_TIME = r"(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"


def _is_path(text: str) -> bool:
    """Absolute paths need two segments or an extension; relative ones a ``./`` or extension."""
    if text.startswith(("./", "../", "~/")):
        return True
    segments = text.strip("/").split("/")
    if any(not s or (s.endswith(".") and s not in {".", ".."}) for s in segments):
        return False
    has_extension = re.search(r"[A-Za-z0-9_-]\.[A-Za-z][A-Za-z0-9]{0,7}$", segments[-1]) is not None
    if text.startswith("/"):
        return len(segments) >= 2 or has_extension
    return has_extension


def _is_date(text: str) -> bool:
    """Numeric dates need a real month and day (either order for ``dd/mm/yyyy``)."""
    first, second, third = (int(part) for part in re.findall(r"\d+", text)[:3])
    if first > 31:
        return 1 <= second <= 12 and 1 <= third <= 31
    return 1 <= min(first, second) <= 12 and max(first, second) <= 31


def _has_digit_run(text: str) -> bool:
    return re.search(r"\d{3}", text) is not None


def _is_hex_hash(text: str) -> bool:
    return re.search(r"\d", text) is not None and re.search(r"[a-fA-F]", text) is not None


_Validator = Callable[[str], bool] | None

_PATTERNS: tuple[tuple[re.Pattern[str], _Validator], ...] = tuple(
    (re.compile(pattern, re.ASCII), validator)
    for pattern, validator in (
        # URLs and e-mail addresses.
        (r"(?:https?://|www\.)[^\s<>\"'`，。；！？、（）【】「」　]+", None),
        (r"(?<![\w.+-])[\w.%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}", None),
        # UUIDs.
        (r"(?<![\w-])[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}(?![\w-])", None),
        # File paths: /abs/path, ./rel, ../rel, ~/rel, dir/file.ext, C:\dir\file.
        (r"(?<![\w/.:~@-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]*\w", _is_path),
        (r"(?<![\w])[A-Za-z]:\\(?:[\w.-]+\\)*[\w.-]+", None),
        # Order-like ids: A-1001, ORD-2026-0042, INV12345.
        (r"(?<![\w-])[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)+(?![\w-])", _has_digit_run),
        (r"(?<![\w-])[A-Z]+\d{3,}[A-Z0-9]*(?![\w-])", None),
        # Dates: 2026-09-02(T14:30Z), 2026/09/02, 09/02/2026, 2026年9月2日, Sep 2, 2026.
        (rf"(?<![\d.])\d{{4}}([-/.])\d{{1,2}}\1\d{{1,2}}{_ISO_TIME}(?!\d)", _is_date),
        (r"(?<![\d.])\d{1,2}([-/.])\d{1,2}\1\d{4}(?!\d)", _is_date),
        (r"\d{4}\s*年\s*\d{1,2}\s*月(?:\s*\d{1,2}\s*[日号])?", None),
        (r"(?<!\d)\d{1,2}\s*月\s*\d{1,2}\s*[日号]", None),
        (rf"\b{_MONTHS}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}\b", None),
        (rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTHS}\s+\d{{4}}\b", None),
        # Amounts: $30.00, ¥1,200, USD 12.5, 30 EUR, 1200元.
        (rf"{_SIGNS}\s?{_NUMBER}(?!\d)", None),
        (rf"\b{_CODES}\s?{_NUMBER}(?!\d)", None),
        (rf"(?<![\d.,]){_NUMBER}\s?{_CODES}\b", None),
        (rf"(?<![\d.,]){_NUMBER}\s?{_CN_UNITS}", None),
        # Times: 14:30, 9:05:10, 2:30 pm.
        (r"(?<![\d:.])(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)?(?:\s?[AaPp][Mm]\b)?(?![\d:])", None),
        # Hex hashes (one case), then long numbers.
        (r"(?<![\w-])(?:[0-9a-f]{7,64}|[0-9A-F]{7,64})(?![\w-])", _is_hex_hash),
        (r"(?<![\w.,])\d{4,}(?!\w|[.,]\d)", None),
    )
)
"""Identifier patterns in priority order: a match inside an earlier match is dropped."""


def extract_identifiers(text: str) -> list[str]:
    """Exact identifiers in ``text``, in order of appearance, without duplicates."""
    return list(_identifiers(text))


@lru_cache(maxsize=4_096)
def _identifiers(text: str) -> tuple[str, ...]:
    """Memoized: the same folded text is read again by later compactions."""
    found: list[tuple[int, str]] = []
    taken: list[tuple[int, int]] = []
    for pattern, validator in _PATTERNS:
        for match in pattern.finditer(text):
            value = match.group(0).rstrip(_TRAILING_PUNCTUATION)
            start, end = match.start(), match.start() + len(value)
            if not value or (validator is not None and not validator(value)):
                continue
            if any(start < t_end and t_start < end for t_start, t_end in taken):
                continue
            taken.append((start, end))
            found.append((start, value))
    return tuple(dict.fromkeys(value for _, value in sorted(found)))


_SENTENCE_BREAK = re.compile(r"(?<=[。！？；])|(?<=[.!?])(?=\s)|\n")


def split_sentences(text: str) -> list[str]:
    """Sentences and lines of ``text``, stripped, with their end punctuation kept."""
    return [part.strip() for part in _SENTENCE_BREAK.split(text) if part.strip()]


_ENGLISH_MARKERS = (
    r"\b(?:must|mustn['’]t|do\s+not|don['’]t|never|always|only|without|at\s+most|at\s+least"
    r"|no\s+more\s+than|make\s+sure|avoid(?:s|ing)?|keep\b[^.!?]{0,60}?\b(?:under|below))\b"
)
_CHINESE_MARKERS = (
    r"不要|必须|只能|不能|务必|禁止|不得|请勿|一定要|不许|(?<![不仅])仅"
    r"|(?<![特分区类级识性告离辨差派个鉴判作诀送道])别(?![人的处名墅致称])"
)
_MARKERS = re.compile(f"{_ENGLISH_MARKERS}|{_CHINESE_MARKERS}", re.IGNORECASE | re.ASCII)
"""An explicit constraint marker, English or Chinese (ASCII word boundaries: 不要 needs none)."""


def is_constraint(sentence: str) -> bool:
    """True when ``sentence`` carries an explicit constraint marker (English or Chinese)."""
    return _MARKERS.search(sentence) is not None


_TIMEOUT = re.compile(
    r"time[ds]?\s*out|deadline[\s_]+exceeded|超时|outcome\s+is\s+unknown|no\s+result\s+was\s+recorded",
    re.IGNORECASE,
)
"""Error text meaning the call may or may not have taken effect (missing results included)."""

_CANCELLED = re.compile(r"cancell?ed|aborted|取消|中止", re.IGNORECASE)

_SUCCESS = r"(?:succeeded|success|successful(?:ly)?|completed|done|went\s+through)\b"
_FAILURE = r"(?:failed|failures?|errors?|errored|unsuccessful(?:ly)?)\b"
_HEDGE = r"(?:\b(?:not|never|no|whether|if|may|might|could)|n['’]t)\s+(?:\w+\s+){0,2}?"

_SUCCESS_WORDS = re.compile(rf"\b{_SUCCESS}|成功|已完成", re.IGNORECASE | re.ASCII)
_FAILURE_WORDS = re.compile(rf"\b{_FAILURE}|失败|出错|报错", re.IGNORECASE | re.ASCII)
_NOT_SUCCESS = re.compile(
    rf"{_HEDGE}{_SUCCESS}|(?:未|没有|没|不|并未|尚未|未能|是否|可能|或许)(?:已经|已|能)?(?:成功|完成)"
    r"|成功与否",
    re.IGNORECASE | re.ASCII,
)
"""Negated or hedged success ("not completed", "whether it went through", 未成功)."""

_NOT_FAILURE = re.compile(
    rf"(?:\b(?:without|zero)\s+(?:\w+\s+){{0,2}}?|{_HEDGE}){_FAILURE}|\berrors?[-\s]free\b"
    r"|(?:未|没有|没|不|无|是否)(?:出现)?(?:失败|出错|报错)",
    re.IGNORECASE | re.ASCII,
)
"""Negated failure ("no errors", "without failure", 未失败)."""

_CONJUNCTION = re.compile(
    r"[\s,、&/()（）]*(?:and|or|plus|和|与|及|以及|或)?[\s,、&/()（）]*", re.I
)
"""Text between two call mentions that shares the later mention's claim."""

_LEAD_HEDGE = re.compile(
    r"(?:\b(?:whether|if|until|unless|once|confirm|verify|check|ensure)|make\s+sure"
    r"|如果|若|一旦|确认|检查|核实)(?:\s+(?:that|the|whether|if))?[\s(（]*$",
    re.IGNORECASE | re.ASCII,
)
"""A condition right before a mention: what follows is not a claim about that call."""


def error_outcome(text: str) -> Literal["unknown", "cancelled", "failed"]:
    """The state of a call whose tool result is an error with this text."""
    if _TIMEOUT.search(text):
        return "unknown"
    return "cancelled" if _CANCELLED.search(text) else "failed"


def outcome_claims(text: str) -> tuple[bool, bool]:
    """Whether ``text`` asserts success and whether it asserts failure (negations ignored)."""
    success = _SUCCESS_WORDS.search(_NOT_SUCCESS.sub(" ", text)) is not None
    failure = _FAILURE_WORDS.search(_NOT_FAILURE.sub(" ", text)) is not None
    return success, failure


def has_outcome_words(text: str) -> bool:
    """Whether ``text`` contains any success or failure word at all (a cheap pre-check)."""
    return _SUCCESS_WORDS.search(text) is not None or _FAILURE_WORDS.search(text) is not None


@lru_cache(maxsize=4_096)
def token_pattern(text: str) -> re.Pattern[str]:
    """Finds ``text`` as a whole token (``call_1`` but not inside ``call_12``).

    Memoized: every summary check looks for the same call ids and tool names again.
    """
    return re.compile(rf"(?<![A-Za-z0-9_-]){re.escape(text)}(?![A-Za-z0-9_-])", re.IGNORECASE)


@lru_cache(maxsize=4_096)
def _verbatim_pattern(text: str) -> re.Pattern[str]:
    """Finds ``text`` exactly (case included), not as part of a longer word or id."""
    before = r"(?<![A-Za-z0-9_-])" if re.match(r"[A-Za-z0-9_-]", text) else ""
    after = r"(?![A-Za-z0-9_-])" if re.search(r"[A-Za-z0-9_-]$", text) else ""
    return re.compile(before + re.escape(text) + after)


def shown_verbatim(identifier: str, text: str) -> bool:
    """Whether ``text`` shows ``identifier`` exactly, as a whole token.

    Case counts, and a match inside a longer id does not (``A-1001`` is not shown by
    ``A-10012`` or ``a-1001``), so an identifier this finds is readable in ``text`` as is.
    """
    if not identifier or identifier not in text:  # the common case, without a regex
        return False
    return _verbatim_pattern(identifier).search(text) is not None


def claims_by_mention(sentence: str, spans: list[tuple[int, int]]) -> list[tuple[bool, bool]]:
    """The (success, failure) claims made about each mention in ``sentence``.

    A mention owns the text up to the next mention (the first also what precedes it); one
    that owns no claim and is only joined to the next ("a and b failed") shares its claims.
    A mention led by a condition ("if", "confirm", 如果) makes no claim.
    """
    if not spans:
        return []
    ends = [start for start, _ in spans[1:]] + [len(sentence)]
    gaps = [sentence[end:stop] for (_, end), stop in zip(spans, ends, strict=True)]
    hedged = _hedged(sentence, spans, gaps)
    claims: list[tuple[bool, bool]] = [(False, False)] * len(spans)
    for index in reversed(range(len(spans))):
        if hedged[index]:
            continue
        own = outcome_claims((sentence[: spans[0][0]] if index == 0 else "") + " " + gaps[index])
        if own == (False, False) and index + 1 < len(spans) and _CONJUNCTION.fullmatch(gaps[index]):
            own = claims[index + 1]
        claims[index] = own
    return claims


def _hedged(sentence: str, spans: list[tuple[int, int]], gaps: list[str]) -> list[bool]:
    """Whether each mention is led by a condition (or joined to one that is)."""
    hedged: list[bool] = []
    for index, (start, _) in enumerate(spans):
        lead = gaps[index - 1] if index else sentence[:start]
        joined = index > 0 and hedged[-1] and _CONJUNCTION.fullmatch(lead) is not None
        hedged.append(joined or _LEAD_HEDGE.search(lead) is not None)
    return hedged


def scalar_strings(value: object) -> Iterator[str]:
    """Every string and number inside a JSON-like value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from scalar_strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from scalar_strings(item)
