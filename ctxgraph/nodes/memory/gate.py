"""A cheap lexical check run before the memory model: could a fact come from the turn.

Only the user's own rows count: a fact is stored only with evidence quoted from a user
message, so the assistant's answers can never be its source. The check errs towards
calling the model: any first-person statement, preference, identity, plan, constraint,
correction, date or project statement (English or Chinese) lets the turn through. What
it skips is a turn of bare requests and questions ("run the tests", "what does this
function return?"), which ``filter_for_memory`` keeps but no durable fact comes from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ctxgraph.nodes.memory.filter import USER
from ctxgraph.store.memory.cues import states_durable_fact

NO_CUE = "no_fact_cue"
"""The reason a gated turn is skipped: no user row holds a cue a fact could come from."""

NO_USER_TEXT = "no_user_text"
"""The reason a turn with no user row at all is skipped."""

# "tell me", "帮我": the user as the object of a request is not a statement about them.
_REQUEST_OBJECT = re.compile(
    r"\b(?:tell|show|give|help|let|get|send|find|walk|teach|explain\s+to|ask)\s+(?:me|us)\b"
    r"|帮我|给我|告诉我|替我|让我看看|跟我说|帮忙|请问我",
    re.IGNORECASE,
)

_ENGLISH = (
    # first person
    r"\b(?:i|i'm|im|i've|i'd|i'll|my|mine|myself|we|we're|we've|we'll|our|ours)\b",
    # preferences and style
    r"\b(?:prefer\w*|like[sd]?|love[sd]?|hate[sd]?|enjoy\w*|dislike[sd]?|favou?rite\w*|rather)\b",
    r"\b(?:answer|reply|respond|write|talk|speak|explain)\w*\s+(?:in|with|using|without)\b",
    # constraints and standing instructions
    r"\b(?:always|never|usually|from\s+now\s+on|going\s+forward|in\s+(?:the\s+)?future)\b",
    r"\b(?:don't|do\s+not|doesn't|must|mustn't|should|shouldn't|avoid|stop)\b",
    r"\bplease\s+(?:use|keep|make\s+sure|remember|stick|only)\b",
    # identity, work and life
    r"\b(?:call\s+me|about\s+me|name[sd]?|born|birthday|live[sd]?|living|moved|based\s+in)\b",
    r"\b(?:job|role|team|manager|boss|colleague|wife|husband|partner|kids?|son|daughter)\b",
    # plans and goals
    r"\b(?:plan\w*|going\s+to|gonna|want\s+to|intend\w*|goal|deadline|remind\s+me)\b",
    r"\b(?:tomorrow|next\s+(?:week|month|year|quarter)|on\s+call|vacation|holiday)\b",
    # corrections
    r"\b(?:actually|instead|correction|wrong|mistake|no\s+longer|anymore|changed|switched)\b",
    r"\b(?:remember|keep\s+in\s+mind|note|noted\s+that|forget)\b",
    # the project
    r"\b(?:project|repo|repository|codebase|stack|convention|uses|targets|runs\s+on)\b",
    # dates and times
    r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekends?)\b",
    r"\b(?:january|february|march|april|may|june|july|august|september|october|november"
    r"|december)\b",
    r"\b(?:19|20)\d\d\b|\b\d{1,2}[/.-]\d{1,2}\b|\b\d{1,2}(?::\d\d)?\s?(?:am|pm)\b",
)

_CHINESE = (
    r"我|咱|俺|本人|自己",  # first person (after the request objects are removed)
    r"喜欢|爱|讨厌|偏好|习惯|宁愿|最好|受不了|不想|不要|别|不用|不喜欢",
    r"总是|一直|从不|从来|每次|每天|每周|以后|今后|将来|往后|默认",
    r"记住|记得|别忘|注意|务必|必须|应该|一定要|请用|用中文|用英文|回答|回复",
    r"叫|名字|生日|出生|住|搬|老家|工作|公司|职位|岗位|同事|老板|领导|团队|家人|老婆|老公"
    r"|孩子|儿子|女儿|父母|朋友|学校|老师|同学|考试|作业|班上|夏令营|比赛",
    r"爸|妈|爷爷|奶奶|外公|外婆|哥哥|姐姐|弟弟|妹妹|宠物|狗狗|猫咪",
    r"开心|难过|伤心|害怕|怕|生气|烦|担心|紧张|兴奋|孤单|好玩|好吃|吓人",  # how it felt
    r"计划|打算|准备|想要|目标|截止|明天|下周|下个月|明年|周末|假期",
    r"今天|昨天|前天|上次|那次|那天|之前|以前|最近|去年|小时候|曾经|复查|生病",  # events
    r"其实|不对|错了|搞错|改成|改为|更正|纠正|而是|不再|换成",
    r"项目|仓库|代码库|技术栈|规范",
    r"\d+\s*[年月日号点]|星期|周[一二三四五六日天]",
)

_CUE = re.compile("|".join((*_ENGLISH, *_CHINESE)), re.IGNORECASE)

# A capitalized word after a lower-case word or inside Chinese text: a name ("Priya",
# "Emily什么时候再来"). Case-sensitive, unlike the cues above.
_NAME = re.compile(
    r"(?:(?<=[a-z,;] )|(?<=[\u4e00-\u9fff]))[A-Z][a-z]{2,}|^[A-Z][a-z]{2,}(?=[\u4e00-\u9fff])"
)


def has_fact_cue(text: str) -> bool:
    """True when ``text`` holds a cue a durable fact could come from.

    Every statement the acceptance gate recognises as a durable fact
    (``states_durable_fact``, which lifts a model's ``transactional`` label) has one, so
    this check never keeps from the model a turn the gate would store from.
    """
    if states_durable_fact(text):
        return True
    text = _REQUEST_OBJECT.sub(" ", text)
    return _CUE.search(text) is not None or _NAME.search(text) is not None


def gate_reason(rows: Iterable[Mapping[str, str]]) -> str | None:
    """Why the memory model need not see ``rows``, or None when it should.

    ``rows`` are ``filter_for_memory`` rows; only the user's are read. None as soon as
    one user row has a fact cue (``has_fact_cue``).
    """
    users = [row.get("content", "") for row in rows if row.get("role") == USER]
    if not users:
        return NO_USER_TEXT
    if any(has_fact_cue(text) for text in users):
        return None
    return NO_CUE
