"""Replays a real small model's recorded memory answers through the extraction ladder.

The recorded outputs of Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) in
``../shared/data/real_model/`` hold 26 memory extraction answers: 12 of the memory probe
(six planted user turns, asked twice) and 14 of an order-support session. Each answer is
replayed as the memory model's reply to the request it answered, over the rows of that
request's ``<new_conversation>`` block, into an empty Store, and every stored fact is
judged: a planted fact (its content states what the turn planted), with a misleading key
or not, or a wrong fact. The five planted facts are the answer language, the job, the
answer length, the name and the office address.

    python bench/extraction_replay.py [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langgraph.store.memory import InMemoryStore

from ctxgraph.nodes.memory.extract import MemoryExtractor
from ctxgraph.state.context import Context
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import DEFAULT_THRESHOLD

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_model"
RECORDS = "qwen2.5-coder-1.5b-instruct.jsonl"
CONTEXT = Context(user_id="replay")


@dataclass(frozen=True)
class Planted:
    """A fact a scripted user turn plants, and how a stored fact is recognised as it."""

    name: str
    content: str
    """A pattern the stored content matches when it states the planted fact."""
    key: str
    """A pattern a fitting key matches (another key is misleading: it may replace an
    unrelated fact stored under it)."""


PLANTED = {
    "constraint:chinese": Planted("language", r"chinese|\bzh\b|zh-|中文|mandarin", r"language"),
    "fact:python-dev": Planted(
        "job",
        r"developer|engineer|programmer|backend",
        r"job|role|occupation|profession|work|developer|engineer",
    ),
    "pref:short": Planted("answer length", r"short", r"length|short|brevity|concise"),
    "fact:name": Planted("name", r"\blin\b", r"name"),
    "fact:office-address": Planted("office address", r"harbour", r"address|office"),
}
"""The planted turns, by ``turn_kind``."""

SOURCES = (("memory_probe", 1), ("memory_probe", 2), ("session", None))
"""The replayed groups: each probe pass, and the session."""

_ROW = re.compile(r"^\[([^\]]+)\] (user|assistant): (.*)$")


@dataclass
class Replay:
    """One recorded answer replayed: what the ladder stored and what it refused."""

    record: dict[str, Any]
    stored: list[tuple[str, str]] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: str | None = None
    asked_lines: bool = False
    """The ladder asked for plain lines (the recorded answer held nothing usable)."""

    def verdicts(self) -> list[str]:
        """Per stored fact: ``planted``, ``planted, misleading key`` or ``wrong``."""
        planted = PLANTED.get(self.record.get("turn_kind", ""))
        out = []
        for key, content in self.stored:
            if planted is None or not re.search(planted.content, content, re.IGNORECASE):
                out.append("wrong")
            elif re.search(planted.key, key, re.IGNORECASE):
                out.append(f"planted ({planted.name})")
            else:
                out.append(f"planted ({planted.name}), misleading key")
        return out


def memory_records(data: Path = DATA) -> list[dict[str, Any]]:
    """The recorded memory calls, in file order."""
    lines = (data / RECORDS).read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["role"] == "memory"]


def rows_of(record: dict[str, Any]) -> list[dict[str, str]]:
    """The rows of the recorded request, rebuilt from its ``<new_conversation>`` block."""
    prompt = str(record["request"]["messages"][-1]["content"])
    block = prompt.split("<new_conversation>\n", 1)[1].split("\n</new_conversation>", 1)[0]
    rows = []
    for line in block.splitlines():
        match = _ROW.match(line)
        if match is None:
            raise ValueError(f"not a conversation row: {line!r}")
        rows.append({"id": match[1], "role": match[2], "content": match[3]})
    return rows


def replay(record: dict[str, Any], repository: MemoryRepository | None = None) -> Replay:
    """Replay one recorded answer through ``MemoryExtractor`` (an empty Store unless given)."""
    repository = repository or MemoryRepository(InMemoryStore())
    asked: list[bool] = []

    def lines(_: list[BaseMessage]) -> AIMessage:
        asked.append(True)  # no recorded answer for the ask for lines: say nothing
        return AIMessage(content="NONE")

    answer = AIMessage(content=record["answer"]["text"], usage_metadata=record.get("usage"))
    model = ScriptedChatModel(script=[answer], responder=lines)
    result = MemoryExtractor(model).extract(
        rows_of(record),
        CONTEXT,
        repository,
        thread_id="replay",
        threshold=DEFAULT_THRESHOLD,
        profile={},
        facts=[],
    )
    return Replay(
        record=record,
        stored=[(fact.key, fact.content) for fact in result.stored],
        rejected=list(result.rejected),
        skipped=result.skipped,
        asked_lines=bool(asked),
    )


def recorded_stored(record: dict[str, Any]) -> int:
    """How many facts ctxgraph stored from the answer when it was recorded."""
    read = record.get("ctxgraph_read")
    if isinstance(read, dict):
        return len(read.get("accepted") or [])
    events = (record.get("ctxgraph_observed") or {}).get("turn_events") or []
    return sum(int(event.get("facts") or 0) for event in events)


def in_group(record: dict[str, Any], source: str, probe_pass: int | None) -> bool:
    """True when ``record`` belongs to the replayed group ``(source, probe_pass)``."""
    return record["source"] == source and record.get("probe_pass") == probe_pass


@dataclass(frozen=True)
class Tally:
    """One group's counts: planted facts stored (of 5), misleading keys, wrong facts."""

    answers: int
    planted: frozenset[str]
    misleading: int
    wrong: int
    asked_lines: int
    before: int


def tally(replays: Sequence[Replay]) -> Tally:
    """Count one group's replays."""
    planted: set[str] = set()
    misleading = wrong = 0
    for one in replays:
        for verdict in one.verdicts():
            if verdict == "wrong":
                wrong += 1
                continue
            planted.add(PLANTED[one.record["turn_kind"]].name)
            misleading += "misleading" in verdict
    return Tally(
        answers=len(replays),
        planted=frozenset(planted),
        misleading=misleading,
        wrong=wrong,
        asked_lines=sum(one.asked_lines for one in replays),
        before=sum(recorded_stored(one.record) for one in replays),
    )


def _group_name(source: str, probe_pass: int | None) -> str:
    return f"probe pass {probe_pass}" if probe_pass is not None else source


def report(records: Sequence[dict[str, Any]]) -> str:
    """The replay table: every answer's stored facts and verdicts, then the counts."""
    lines = ["| group | turn | stored now | verdict |", "|---|---|---|---|"]
    summary = [
        "| group | answers | planted facts stored (of 5) | of them under a misleading key "
        "| wrong facts stored | facts stored at recording | asked for lines |",
        "|---|---|---|---|---|---|---|",
    ]
    for source, probe_pass in SOURCES:
        group = [replay(r) for r in records if in_group(r, source, probe_pass)]
        name = _group_name(source, probe_pass)
        for one in group:
            stored = "; ".join(f"{k} = {c}" for k, c in one.stored) or "(nothing)"
            verdicts = ", ".join(one.verdicts()) or ("-" if one.skipped is None else "unreadable")
            lines.append(f"| {name} | {one.record['turn_kind']} | {stored} | {verdicts} |")
        counts = tally(group)
        kinds = ", ".join(sorted(counts.planted)) or "none"
        summary.append(
            f"| {name} | {counts.answers} | {len(counts.planted)} ({kinds}) | "
            f"{counts.misleading} | {counts.wrong} | {counts.before} | {counts.asked_lines} |"
        )
    session = [r for r in records if r["source"] == "session"]
    repository = MemoryRepository(InMemoryStore())
    for record in session:
        replay(record, repository)
    final = "; ".join(f"{f.key} = {f.content}" for f in repository.list_facts(CONTEXT))
    return "\n".join(
        [
            *lines,
            "",
            *summary,
            "",
            f"The session's answers replayed in order into one Store leave: {final or '(nothing)'}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the replay table; exit 2 when the recorded outputs are not there."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DATA, help="the real_model data folder")
    args = parser.parse_args(argv)
    if not (args.data / RECORDS).is_file():
        print(
            f"the recorded real-model outputs are not there: {args.data / RECORDS} is missing "
            "(they live in ../shared/data/real_model beside the clone)",
            file=sys.stderr,
        )
        return 2
    memory_log = logging.getLogger("ctxgraph.memory")
    level = memory_log.level
    memory_log.setLevel(logging.ERROR)  # the table says what the log lines would
    try:
        print(report(memory_records(args.data)))
    finally:
        memory_log.setLevel(level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
