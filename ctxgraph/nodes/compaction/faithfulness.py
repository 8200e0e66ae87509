"""Checks for what real summaries get wrong: echoed instructions, stale copies, invented runs.

The ledger check (``ledger.find_contradictions``) compares a summary with the ledger only where the
ledger has an entry. A small model writes things it cannot contradict: SESSION INTENT
that repeats the summary prompt ("continue the work without the folded messages"), a
record copied from the previous one although new turns were folded, and "the assistant
successfully retrieved the information" when no tool ever ran. Each check here returns
named problem strings (``ECHO``, ``STALE``, ``INVENTED_SUCCESS`` followed by ``": "``),
which the summary ladder treats like any other problem: one repair request quoting
them, then the next model, then the model-free record. A model-free (degraded) record is
built by code from the folded turns, so only the ledger check applies to it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from string import Formatter
from typing import Any

from langchain_core.messages import BaseMessage

from ctxgraph.nodes.compaction.ledger import CONTRADICTION_MARK, read_ledger
from ctxgraph.nodes.compaction.sections import SECTIONS, TITLES
from ctxgraph.state.identifiers import split_sentences, token_pattern
from ctxgraph.state.messages import is_real_user_message

ECHO = "echo"
"""A section repeats the summary instruction instead of saying something of the session."""

STALE = "stale"
"""The prose equals the previous record's although new turns were folded."""

INVENTED_SUCCESS = "invented_success"
"""A claimed tool run or success that the ledger does not hold."""

TOOL_CALL = "tool_call"
"""The answer called a tool instead of writing the record (a shared-prefix request binds
the main model's tools)."""

MISSING_SECTIONS = "missing_sections"
CONTRADICTION = "contradiction"
OTHER = "other"

REASONS = (ECHO, STALE, INVENTED_SUCCESS, TOOL_CALL, MISSING_SECTIONS, CONTRADICTION, OTHER)
"""Every reason a rejected candidate is reported with (``compaction.rejected``)."""

DEGRADED_KEY = "degraded"
"""Candidate sections built by code carry it (``fallback.DEGRADED``); prose checks skip them."""

ECHO_RUN = 6
"""Consecutive words a section shares with the instruction to count as an echo (a CJK
character counts half a word)."""

STALE_SECTIONS = ("summary", "next_steps")
"""The prose sections that must change when new turns are folded."""

_SHINGLE = 3


def _tokens(text: str) -> list[str]:
    """Words of ``text``, NFKC-normalized and case-folded; each CJK character is a word."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return re.findall(r"[\u3400-\u9fff\uf900-\ufaff]|[^\W\u3400-\u9fff\uf900-\ufaff]+", folded)


def _weight(token: str) -> float:
    return 0.5 if len(token) == 1 and "\u3400" <= token <= "\ufaff" else 1.0


def instruction_text(*templates: str) -> str:
    """The fixed words of prompt templates: their text without the ``{placeholders}``.

    What a template fills in (the previous summary, the folded messages, the request)
    is data, so repeating it is no echo; the words around it are the instruction.
    """
    parts: list[str] = []
    for template in templates:
        try:
            parts.extend(literal for literal, *_ in Formatter().parse(template))
        except ValueError:  # not a format string: all of it is instruction
            parts.append(template)
    # The data blocks' tags are markup, not instruction words.
    return re.sub(r"</?[a-z_]+>", " ", "\n".join(parts))


@lru_cache(maxsize=16)
def _shingles(instruction: str) -> frozenset[tuple[str, ...]]:
    words = _tokens(instruction)
    return frozenset(tuple(words[i : i + _SHINGLE]) for i in range(len(words) - _SHINGLE + 1))


def _longest_echo(text: str, shingles: frozenset[tuple[str, ...]]) -> str:
    """The longest run of ``text``'s words made of the instruction's word triples."""
    words = _tokens(text)
    best: tuple[float, int, int] = (0.0, 0, 0)
    start = None
    for index in range(len(words) - _SHINGLE + 2):
        inside = tuple(words[index : index + _SHINGLE]) in shingles
        if inside and start is None:
            start = index
        if not inside and start is not None:
            end = index + _SHINGLE - 1
            weight = sum(_weight(word) for word in words[start:end])
            best = max(best, (weight, start, end))
            start = None
    weight, first, end = best
    return " ".join(words[first:end]) if weight >= ECHO_RUN else ""


def echo_problems(sections: Mapping[str, Any], instruction: str) -> list[str]:
    """Sections that repeat ``instruction`` (see ``instruction_text``) word for word.

    A run of ``ECHO_RUN`` words shared with the instruction is no summary of the session:
    "The user wants the assistant to continue the work without the folded messages."
    echoes "... so that another agent could continue the work without the folded messages."

    Args:
        sections: The candidate's sections.
        instruction: The fixed text of the prompts the model was sent.

    Returns:
        One ``echo: ...`` problem per echoing section; empty for a model-free record.

    """
    if sections.get(DEGRADED_KEY):
        return []
    shingles = _shingles(instruction)
    problems: list[str] = []
    for key, title in SECTIONS:
        run = _longest_echo(str(sections.get(key) or ""), shingles)
        if run:
            problems.append(
                f'{ECHO}: {title} repeats the instruction ("{run}") instead of saying '
                "what the folded turns hold"
            )
    return problems


def _normalized(text: str) -> str:
    return " ".join(_tokens(text))


def stale_problems(
    sections: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
    folded: Sequence[BaseMessage],
) -> list[str]:
    """A record whose prose equals the previous one's although new user turns were folded.

    SUMMARY and NEXT STEPS are compared after NFKC normalization and case folding,
    without punctuation and white space.

    Args:
        sections: The candidate's sections.
        previous: The record the candidate replaces (None before the first compaction).
        folded: The messages the candidate folds.

    Returns:
        One ``stale: ...`` problem, or none.

    """
    if not previous or sections.get(DEGRADED_KEY):
        return []
    turns = sum(1 for message in folded if is_real_user_message(message))
    if not turns or not _same_prose(sections, previous):
        return []
    plural = "turn was" if turns == 1 else "turns were"
    titles = " and ".join(TITLES[key] for key in STALE_SECTIONS)
    return [
        f"{STALE}: {titles} are the previous record's, word for word, although "
        f"{turns} new user {plural} folded; say what happened in them"
    ]


def _same_prose(sections: Mapping[str, Any], previous: Mapping[str, Any]) -> bool:
    """Whether every ``STALE_SECTIONS`` section is non-empty and equals the previous one's."""
    for key in STALE_SECTIONS:
        now = _normalized(str(sections.get(key) or ""))
        if not now or now != _normalized(str(previous.get(key) or "")):
            return False
    return True


_CLAUSE_BREAK = re.compile(
    r"[,;:，；：、]|\b(?:but|then|while|whereas|however|after|so)\b|但|然后|之后"
)

_HEDGE = re.compile(
    r"\b(?:not|never|no|nor|cannot|unable|fail(?:ed|s)?|without|instead|if|whether|unless"
    r"|until|once|before|will|would|shall|should|can|could|may|might|must|needs?|plan(?:s|ned)?"
    r"|going|intends?|tr(?:y|ies|ied)|attempt(?:s|ed)?|wants?|wanted|asks?|asked)\b|n['’]t\b"
    r"|未|没有|没|不|无法|尚未|将|需要|打算|准备|如果|是否|想",
    re.IGNORECASE,
)
"""Words that make what follows in the clause no claim that something ran."""

_USER = re.compile(r"\b(?:user|customer|client|you|he|she|they)\b|用户|客户|您|你", re.I)
_ASSISTANT = re.compile(
    r"\b(?:assistant|agent|system|tool|model|we|i|it)\b|助手|系统|工具|我", re.I
)

_QUOTE = "`\"'“”‘’"
_NAME = rf"[{_QUOTE}]?([A-Za-z_][\w.-]*)[{_QUOTE}]?"
_CALL_NAME = rf"(?:[{_QUOTE}]([A-Za-z_][\w.-]*)[{_QUOTE}]|([A-Za-z][A-Za-z0-9]*_\w+))"
_RAN = r"(?:used|using|called|calling|invoked|invoking|ran|running|executed|executing)"
_TOOL = r"(?:tool|function)"
_GOT = (
    r"(?:the\s+|a\s+|an\s+)?(?:[\"“'`]|status|results?|order|information|info|data|details"
    r"|unknown|pending|errors?|nothing|no\b|empty)"
)

_CLAIMS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        # "used the lookup_order tool", "by calling `update_order`", "called lookup_order"
        rf"\b{_RAN}\s+(?:the\s+|a\s+|an\s+|its\s+)?(?:{_NAME}\s+)?{_TOOL}s?\b",
        rf"\b{_RAN}\s+(?:the\s+)?{_TOOL}s?\s+{_NAME}",
        rf"\b(?:called|invoked|ran|executed|using|used)\s+{_CALL_NAME}",
        # "the tool returned", "which returned the order status", "the result from the tool"
        rf"\b(?:{_TOOL}|call|lookup|query)\s+(?:also\s+)?(?:returned|reported|showed|responded"
        r"|came\s+back|gave\s+back|succeeded|worked)\b",
        rf"\b(?:which|that|it)\s+(?:also\s+)?returned\s+{_GOT}",
        rf"\b(?:result|output|response)\s+(?:from|of)\s+the\s+(?:{_TOOL}|call|lookup)\b",
        # "successfully retrieved the information", "was able to look up"
        r"\b(?:successfully|was\s+able\s+to|were\s+able\s+to|managed\s+to)\s+"
        r"(?:retriev|fetch|look(?:ed)?\s+up|obtain|get|got|find|found|check|quer|access|"
        r"confirm|verif|pull|read|load|call|run|execut)\w*",
        r"\b(?:retrieved|fetched|looked\s+up|pulled\s+up)\s+(?:the|its|their|order|"
        r"information|info|status|details|data|results?|records?)\b",
        # "has completed the task of finding the order"
        r"\b(?:completed|finished|done\s+with)\s+(?:the\s+(?:task|job|step)\s+of\s+)?"
        r"(?:finding|retrieving|looking\s+up|checking|fetching|querying|tracking)\b",
        # "the assistant confirmed that the order status is pending"
        r"\b(?:confirmed|found|verified|determined|checked|saw|learned|discovered)\s+"
        r"(?:that\s+)?(?:the\s+)?(?:\w+\s+)?(?:status|result|details|tracking|location)\b",
        # Chinese: 成功调用, 已查询, 调用了, 查询到, 工具返回, 返回了结果
        r"成功(?:地)?(?:调用|查询|获取|检索|查到|找到|执行|取得|读取)"
        r"|已(?:经)?(?:调用|查询|获取|检索|查到|找到|执行)"
        r"|(?:调用|查询|获取|检索|执行)了|(?:查询|获取|检索|查)到"
        r"|(?:工具|调用|查询)(?:的)?(?:返回|显示)|返回(?:了)?(?:结果|状态|信息)",
    )
)
"""Wordings that claim a tool ran, returned something or succeeded."""


def _claims(sentence: str) -> list[re.Match[str]]:
    """The claims of a run in ``sentence`` that are not hedged, negated or the user's.

    What a claim says is read in its clause (the text since the last comma, colon or
    "but"): a hedge there ("would call", "did not", 未) or a user as its only subject
    ("the user looked up") makes it no claim. A question claims nothing.
    """
    if sentence.rstrip().endswith(("?", "？")):
        return []
    found: list[re.Match[str]] = []
    for pattern in _CLAIMS:
        for match in pattern.finditer(sentence):
            clause = _CLAUSE_BREAK.split(sentence[: match.start()])[-1]
            if _HEDGE.search(clause):
                continue
            if _USER.search(clause) and not _ASSISTANT.search(clause):
                continue
            found.append(match)
    return found


def _succeeded(ledger: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The tools the ledger holds as succeeded, and every tool name it holds."""
    view = read_ledger(ledger)
    known = {entry["name"] for entry in view["tool_calls"]}
    done = {entry["name"] for entry in view["tool_calls"] if entry["status"] == "succeeded"}
    done.update(name for name, count in view["aggregated"].items() if count > 0)
    for name, counts in view["folded_calls"].items():
        if counts.get("succeeded", 0) > 0:
            done.add(name)
    known.update(view["aggregated"], view["folded_calls"])
    return done, known


def _named(sentence: str, claims: Iterable[re.Match[str]], known: set[str]) -> set[str]:
    """Tool names the claims give: a known tool's name, or a snake_case or quoted one."""
    names = {name for name in known if token_pattern(name).search(sentence)}
    for claim in claims:
        for group in claim.groups():
            if group and ("_" in group or group in known):
                names.add(group)
    return names


def invented_success_problems(sections: Mapping[str, Any], ledger: Mapping[str, Any]) -> list[str]:
    """Sentences that claim a tool ran or succeeded where the ledger holds no such success.

    A claim is a wording of a run, a result or a success ("used the lookup_order tool",
    "which returned", "successfully retrieved", 成功查询, 调用了), not negated, hedged or
    asked. It is invented when the ledger holds no succeeded call at all, or when it
    names a tool the ledger does not hold as succeeded.

    Args:
        sections: The candidate's sections.
        ledger: The ledger the candidate is committed with (any stored shape).

    Returns:
        One ``invented_success: ...`` problem per such sentence; none for a model-free record.

    """
    if sections.get(DEGRADED_KEY):
        return []
    done, known = _succeeded(ledger)
    problems: list[str] = []
    for key, title in SECTIONS:
        for sentence in split_sentences(str(sections.get(key) or "")):
            claims = _claims(sentence)
            if not claims:
                continue
            if not done:
                why = "no tool call succeeded in this session"
            else:
                missing = sorted(_named(sentence, claims, known) - done)
                if not missing:
                    continue
                why = f"the ledger holds no succeeded call of {', '.join(missing)}"
            problems.append(f'{INVENTED_SUCCESS}: {title} says "{sentence}", but {why}')
    return problems


def faithfulness_problems(
    sections: Mapping[str, Any],
    *,
    previous: Mapping[str, Any] | None,
    folded: Sequence[BaseMessage],
    ledger: Mapping[str, Any],
) -> list[str]:
    """The stale and invented-success problems of candidate sections (see the module doc).

    The echo check needs the prompt the model was sent, so the summary writer runs it.

    Args:
        sections: The candidate's sections (``DEGRADED_KEY`` set for a model-free record).
        previous: The record the candidate replaces.
        folded: The messages it folds.
        ledger: The ledger it is committed with.

    Returns:
        The problems, each starting with its name.

    """
    return [
        *stale_problems(sections, previous, folded),
        *invented_success_problems(sections, ledger),
    ]


def problem_reasons(problems: Iterable[str], *, missing_sections: bool = False) -> list[str]:
    """The names of ``problems``, once each, in ``REASONS`` order.

    Args:
        problems: Problem strings of rejected candidates.
        missing_sections: The answer lacked sections (a parse failure, not a check).

    Returns:
        Names from ``REASONS``; ``other`` for a problem no check names.

    """
    found: set[str] = {MISSING_SECTIONS} if missing_sections else set()
    for problem in problems:
        name = problem.partition(": ")[0]
        if name in (ECHO, STALE, INVENTED_SUCCESS, TOOL_CALL):
            found.add(name)
        elif CONTRADICTION_MARK in problem:
            found.add(CONTRADICTION)
        else:
            found.add(OTHER)
    return [reason for reason in REASONS if reason in found]
