"""Skills: parsing SKILL.md, the cached catalog of folders and Store, safe file reading."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.store.skills import (
    EMPTY_SNAPSHOT,
    STORE_NAMESPACE,
    STORE_REF_PREFIX,
    Skill,
    SkillCatalog,
    SkillFileError,
    SkillFormatError,
    SkillSnapshot,
    alist_skill_files,
    aread_skill_text,
    list_skill_files,
    parse_skill_md,
    read_skill_text,
    unknown_tools,
    valid_skill_name,
)

MINIMAL = """---
name: skill-name
description: A description of what this skill does and when to use it.
---

# Skill body

Step-by-step instructions.
"""

FULL = """---
name: pdf-processing
description: Extract text and tables from PDF files, fill PDF forms, and merge multiple PDFs.
  Use when working with PDF documents or when the user mentions PDFs, forms, or document
  extraction.
license: Apache-2.0
compatibility: Requires git, docker, jq, and access to the internet
metadata:
  author: example-org
  version: "1.0"
allowed-tools: Bash(git:*) Bash(jq:*) Read
---
## Instructions

Use pdfplumber to extract text. See [the reference](references/REFERENCE.md).
"""

LISTED = """---
name: data-analysis
description: Analyze CSV data.
allowed-tools:
  - read_file
  - search
  - read_file
---
Body.
"""


def skill_md(name: str, description: str = "Does things.", extra: str = "", body: str = "") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body or 'Body.'}\n"


def write_skill(root: Path, folder: str, text: str) -> Path:
    path = root / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def parse(text: str, folder: str | None = None) -> Skill:
    skill, _ = parse_skill_md(text, file="/x/SKILL.md", folder_name=folder, source="dir")
    return skill


def format_error(text: str, folder: str | None = None) -> SkillFormatError:
    with pytest.raises(SkillFormatError) as caught:
        parse_skill_md(text, file="/x/SKILL.md", folder_name=folder, source="dir")
    return caught.value


# --- format ----------------------------------------------------------------------------


def test_the_minimal_spec_example_parses() -> None:
    skill, warnings = parse_skill_md(
        MINIMAL, file="/s/skill-name/SKILL.md", folder_name="skill-name", source="dir"
    )
    assert warnings == ()
    assert skill.name == "skill-name"
    assert skill.description.startswith("A description of what")
    assert skill.allowed_tools is None
    assert skill.body == "# Skill body\n\nStep-by-step instructions."
    assert skill.path == "/s/skill-name/SKILL.md"
    assert skill.sha256 == hashlib.sha256(MINIMAL.encode()).hexdigest()
    assert skill.source == "dir"


def test_the_full_spec_example_parses_with_a_space_separated_allowed_tools() -> None:
    skill, warnings = parse_skill_md(
        FULL, file="store://skills/pdf-processing/SKILL.md", folder_name=None, source="store"
    )
    assert warnings == ()
    assert skill.name == "pdf-processing"
    assert skill.description.endswith("document extraction.")
    assert skill.allowed_tools == ("Bash(git:*)", "Bash(jq:*)", "Read")
    assert skill.body.startswith("## Instructions")


def test_allowed_tools_as_a_yaml_list_is_deduplicated_in_order() -> None:
    assert parse(LISTED).allowed_tools == ("read_file", "search")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("", None),
        ("allowed-tools: []\n", ()),
        ('allowed-tools: ""\n', ()),
        ("allowed-tools: a b a\n", ("a", "b")),
        ("allowed-tools: [x, y]\n", ("x", "y")),
    ],
)
def test_allowed_tools_absent_empty_string_and_list(
    extra: str, expected: tuple[str, ...] | None
) -> None:
    assert parse(skill_md("a", extra=extra)).allowed_tools == expected


def test_crlf_and_bom_are_accepted_and_hashed_as_given() -> None:
    text = "\ufeff" + MINIMAL.replace("\n", "\r\n")
    skill = parse(text, "skill-name")
    assert skill.body == "# Skill body\r\n\r\nStep-by-step instructions.".replace("\r\n", "\n")
    assert skill.sha256 == hashlib.sha256(text.encode()).hexdigest()


def test_an_unknown_field_is_a_warning_and_the_skill_is_kept() -> None:
    skill, warnings = parse_skill_md(
        skill_md("a", extra="version: 2\n"), file="/a/SKILL.md", folder_name="a", source="dir"
    )
    assert skill.name == "a"
    assert [(w.file, w.field) for w in warnings] == [("/a/SKILL.md", "version")]


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        ("# no front matter\n", None, "no front matter"),
        ("\n---\nname: a\ndescription: d\n---\n", None, "no front matter"),
        ("---\nname: a\ndescription: d\n", None, "not closed"),
        ("---\nname: [a\ndescription: d\n---\n", None, "invalid YAML"),
        ("---\n- a\n- b\n---\n", None, "mapping"),
        ("---\n---\n", None, "mapping"),
        (skill_md("Bad_Name"), "name", "'Bad_Name'"),
        (skill_md("-a"), "name", "'-a'"),
        (skill_md("a-"), "name", "'a-'"),
        (skill_md("a--b"), "name", "'a--b'"),
        (skill_md("a" * 65), "name", "1-64"),
        ("---\ndescription: d\n---\n", "name", "missing"),
        ("---\nname: 12\ndescription: d\n---\n", "name", "string"),
        ("---\nname: a\n---\n", "description", "missing"),
        ('---\nname: a\ndescription: "  "\n---\n', "description", "empty"),
        (skill_md("a", "x" * 1025), "description", "1025 characters"),
        (skill_md("a", extra="allowed-tools: 3\n"), "allowed-tools", "int"),
        (skill_md("a", extra="allowed-tools: [a, 1]\n"), "allowed-tools", "item 1"),
        (skill_md("a", extra='allowed-tools: ["a b"]\n'), "allowed-tools", "item 0"),
        (skill_md("a", extra='allowed-tools: [""]\n'), "allowed-tools", "item 0"),
        (skill_md("a", extra="allowed-tools: {a: b}\n"), "allowed-tools", "dict"),
        (skill_md("a", body="\ud800"), None, "Unicode"),
    ],
)
def test_fatal_problems_name_the_field(text: str, field: str | None, fragment: str) -> None:
    error = format_error(text)
    assert error.problem.file == "/x/SKILL.md"
    assert error.problem.field == field
    assert fragment in error.problem.message
    assert "/x/SKILL.md" in str(error)


@pytest.mark.parametrize(
    ("extra", "field", "fragment"),
    [
        ("compatibility: [x]\n", "compatibility", "string"),
        (f"compatibility: {'c' * 501}\n", "compatibility", "1-500"),
        ("metadata: [x]\n", "metadata", "mapping"),
        ("metadata:\n  version: 1.0\n", "metadata", "version"),
        ("license: 3\n", "license", "string"),
    ],
)
def test_a_bad_descriptive_field_is_reported_and_the_skill_kept(
    extra: str, field: str, fragment: str
) -> None:
    skill, warnings = parse_skill_md(
        skill_md("a", extra=extra), file="/x/SKILL.md", folder_name="a", source="dir"
    )
    assert skill.name == "a"
    assert [(w.file, w.field) for w in warnings] == [("/x/SKILL.md", field)]
    assert fragment in warnings[0].message and "ignored" in warnings[0].message


def test_a_name_differing_from_its_folder_is_refused() -> None:
    error = format_error(skill_md("other"), folder="mine")
    assert error.problem.field == "name"
    assert "'mine'" in error.problem.message


def test_the_yaml_error_keeps_only_its_first_line() -> None:
    error = format_error("---\nname: a\n  bad: indent: here\n---\n")
    assert error.problem.message.startswith("invalid YAML: ")
    assert "\n" not in error.problem.message


def test_valid_skill_names() -> None:
    assert valid_skill_name("a")
    assert valid_skill_name("pdf-processing2")
    assert valid_skill_name("a" * 64)
    for bad in ("", "A", "a_b", "-a", "a-", "a--b", "a" * 65, "a b", "é"):
        assert not valid_skill_name(bad), bad


# --- catalog: folders ------------------------------------------------------------------


BAD_SKILLS = {
    "bad-pattern": (skill_md("Bad_Pattern"), "name"),
    "not-the-folder": (skill_md("other-name"), "name"),
    "no-description": ("---\nname: no-description\n---\nBody\n", "description"),
    "too-long": (skill_md("too-long", "d" * 1025), "description"),
    "bad-tools": (skill_md("bad-tools", extra="allowed-tools: 7\n"), "allowed-tools"),
    "yaml-error": ("---\nname: [yaml-error\n---\n", None),
    "no-front-matter": ("# Just markdown\n", None),
}


@pytest.mark.parametrize("folder", sorted(BAD_SKILLS))
def test_a_malformed_skill_is_skipped_logged_and_the_others_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, folder: str
) -> None:
    text, field = BAD_SKILLS[folder]
    write_skill(tmp_path, "alpha", skill_md("alpha"))
    bad = write_skill(tmp_path, folder, text)
    write_skill(tmp_path, "zulu", skill_md("zulu"))
    catalog = SkillCatalog([tmp_path])
    with caplog.at_level(logging.WARNING, logger="ctxgraph.skills"):
        snapshot = catalog.refresh()
    assert snapshot.names == ("alpha", "zulu")
    assert snapshot.readable
    assert [(p.file, p.field) for p in snapshot.problems] == [(str(bad), field)]
    warnings = [r.getMessage() for r in caplog.records if r.name == "ctxgraph.skills"]
    assert len(warnings) == 1
    assert str(bad) in warnings[0]
    if field is not None:
        assert f": {field}: " in warnings[0]


def test_the_warning_for_a_malformed_skill_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_skill(tmp_path, "bad", skill_md("Bad"))
    write_skill(tmp_path, "good", skill_md("good"))
    catalog = SkillCatalog([tmp_path])
    with caplog.at_level(logging.WARNING, logger="ctxgraph.skills"):
        first = catalog.refresh()
        write_skill(tmp_path, "new", skill_md("new"))
        second = catalog.refresh()
        third = catalog.refresh()
    assert second is not first and third is second
    assert second.names == ("good", "new")
    assert len([r for r in caplog.records if r.name == "ctxgraph.skills"]) == 1


def test_unchanged_sources_return_the_identical_snapshot(tmp_path: Path) -> None:
    write_skill(tmp_path, "a", skill_md("a"))
    catalog = SkillCatalog([tmp_path])
    assert catalog.latest is EMPTY_SNAPSHOT
    first = catalog.refresh()
    assert catalog.refresh() is first
    assert catalog.latest is first


def test_edits_additions_and_removals_are_seen(tmp_path: Path) -> None:
    path = write_skill(tmp_path, "a", skill_md("a", body="one"))
    catalog = SkillCatalog([tmp_path])
    first = catalog.refresh()
    skill = first.get("a")
    assert skill is not None and skill.body == "one"

    path.write_text(skill_md("a", body="two"), encoding="utf-8")  # same size
    stamp = path.stat().st_mtime_ns + 2_000_000_000
    os.utime(path, ns=(stamp, stamp))
    second = catalog.refresh()
    edited = second.get("a")
    assert second.digest != first.digest
    assert edited is not None and edited.body == "two"

    write_skill(tmp_path, "b", skill_md("b"))
    third = catalog.refresh()
    assert third.names == ("a", "b")

    (tmp_path / "b" / "SKILL.md").unlink()
    (tmp_path / "b").rmdir()
    fourth = catalog.refresh()
    assert fourth.names == ("a",)
    assert fourth.digest == second.digest


def test_unchanged_files_are_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_skill(tmp_path, "a", skill_md("a"))
    catalog = SkillCatalog([tmp_path])
    catalog.refresh()
    calls: list[object] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return parse_skill_md(*args, **kwargs)

    monkeypatch.setattr("ctxgraph.store.skills.catalog.parse_skill_md", counting)
    write_skill(tmp_path, "b", skill_md("b"))
    assert catalog.refresh().names == ("a", "b")
    assert len(calls) == 1


def test_a_dir_holding_a_skill_md_is_one_skill(tmp_path: Path) -> None:
    write_skill(tmp_path, "solo", skill_md("solo"))
    snapshot = SkillCatalog([tmp_path / "solo"]).refresh()
    assert snapshot.names == ("solo",)


def test_hidden_entries_and_folders_without_skill_md_are_skipped(tmp_path: Path) -> None:
    write_skill(tmp_path, ".hidden", skill_md("hidden"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "README.md").write_text("not a skill", encoding="utf-8")
    write_skill(tmp_path, "a", skill_md("a"))
    snapshot = SkillCatalog([tmp_path]).refresh()
    assert snapshot.names == ("a",)
    assert snapshot.problems == ()


def test_a_missing_dir_makes_the_snapshot_unreadable_but_others_load(tmp_path: Path) -> None:
    write_skill(tmp_path / "real", "a", skill_md("a"))
    missing = tmp_path / "missing"
    snapshot = SkillCatalog([missing, tmp_path / "real"]).refresh()
    assert not snapshot.readable
    assert snapshot.names == ("a",)
    assert [(p.file, p.field, p.message) for p in snapshot.problems] == [
        (str(missing), None, "folder not found")
    ]


def test_the_first_of_duplicate_names_wins(tmp_path: Path) -> None:
    first = write_skill(tmp_path / "one", "a", skill_md("a", "first"))
    second = write_skill(tmp_path / "two", "a", skill_md("a", "second"))
    snapshot = SkillCatalog([tmp_path / "one", tmp_path / "two"]).refresh()
    skill = snapshot.get("a")
    assert skill is not None and skill.description == "first"
    (problem,) = snapshot.problems
    assert problem.file == str(second)
    assert str(first) in problem.message


def test_disabled_skills_are_left_out(tmp_path: Path) -> None:
    write_skill(tmp_path, "a", skill_md("a"))
    write_skill(tmp_path, "b", skill_md("b"))
    snapshot = SkillCatalog([tmp_path], disabled={"a"}).refresh()
    assert snapshot.names == ("b",)
    assert snapshot.problems == ()


def test_no_sources_give_the_empty_snapshot() -> None:
    assert SkillCatalog().refresh() is EMPTY_SNAPSHOT
    assert SkillCatalog(use_store=True).refresh() is EMPTY_SNAPSHOT


# --- catalog: Store --------------------------------------------------------------------


def put_skill(store: BaseStore, key: str, text: str, files: dict[str, str] | None = None) -> None:
    value: dict[str, Any] = {"content": text}
    if files is not None:
        value["files"] = files
    store.put(STORE_NAMESPACE, key, value)


def test_store_skills_load_after_dir_skills(tmp_path: Path) -> None:
    store = InMemoryStore()
    write_skill(tmp_path, "a", skill_md("a", "from disk"))
    put_skill(store, "a", skill_md("a", "from store"))
    put_skill(store, "b", skill_md("b"), {"references/x.md": "X", "scripts/y.py": "print()"})
    put_skill(store, "bad", skill_md("other"))
    store.put(STORE_NAMESPACE, "broken", {"text": "no content"})
    catalog = SkillCatalog([tmp_path], use_store=True)
    snapshot = catalog.refresh(store)
    a, b = snapshot.get("a"), snapshot.get("b")
    assert a is not None and a.description == "from disk"
    assert b is not None and b.source == "store"
    assert b.path == f"{STORE_REF_PREFIX}b/SKILL.md"
    assert b.files == ("references/x.md", "scripts/y.py")
    assert {(p.file, p.field) for p in snapshot.problems} == {
        (f"{STORE_REF_PREFIX}a/SKILL.md", "name"),
        (f"{STORE_REF_PREFIX}bad/SKILL.md", "name"),
        (f"{STORE_REF_PREFIX}broken/SKILL.md", None),
    }
    assert catalog.refresh(store) is snapshot
    assert snapshot.readable


def test_store_skills_page_through_many_items() -> None:
    store = InMemoryStore()
    for index in range(130):
        put_skill(store, f"s{index:03d}", skill_md(f"s{index:03d}"))
    snapshot = SkillCatalog(use_store=True).refresh(store)
    assert len(snapshot.skills) == 130


async def test_store_skills_load_asynchronously(tmp_path: Path) -> None:
    store = InMemoryStore()
    put_skill(store, "b", skill_md("b"))
    write_skill(tmp_path, "a", skill_md("a"))
    catalog = SkillCatalog([tmp_path], use_store=True)
    snapshot = await catalog.arefresh(store)
    assert snapshot.names == ("a", "b")
    assert await catalog.arefresh(store) is snapshot
    put_skill(store, "b", skill_md("b", "changed"))
    changed = await catalog.arefresh(store)
    skill = changed.get("b")
    assert changed.digest != snapshot.digest
    assert skill is not None and skill.description == "changed"


def test_use_store_without_a_store_has_no_store_skills(tmp_path: Path) -> None:
    write_skill(tmp_path, "a", skill_md("a"))
    snapshot = SkillCatalog([tmp_path], use_store=True).refresh(None)
    assert snapshot.names == ("a",)
    assert snapshot.problems == () and snapshot.readable


class BrokenStore(InMemoryStore):
    def search(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("database is down")

    async def asearch(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("database is down")


async def test_a_failing_store_makes_the_snapshot_unreadable(tmp_path: Path) -> None:
    write_skill(tmp_path, "a", skill_md("a"))
    catalog = SkillCatalog([tmp_path], use_store=True)
    for snapshot in (catalog.refresh(BrokenStore()), await catalog.arefresh(BrokenStore())):
        assert not snapshot.readable
        assert snapshot.names == ("a",)
        (problem,) = snapshot.problems
        assert "database is down" in problem.message


# --- supporting files ------------------------------------------------------------------


@pytest.fixture
def folder_skill(tmp_path: Path) -> Skill:
    root = tmp_path / "skills"
    write_skill(root, "tool", skill_md("tool"))
    folder = root / "tool"
    (folder / "references").mkdir()
    (folder / "references" / "guide.md").write_text("line 1\nline 2\n", encoding="utf-8")
    (folder / "scripts" / "deep").mkdir(parents=True)
    (folder / "scripts" / "deep" / "run.py").write_text("print('hi')\n", encoding="utf-8")
    (folder / "notes.txt").write_text("notes", encoding="utf-8")
    (folder / ".secret").write_text("hidden", encoding="utf-8")
    (folder / ".git").mkdir()
    (folder / ".git" / "config").write_text("hidden", encoding="utf-8")
    (folder / "blob.bin").write_bytes(b"abc\x00def")
    (folder / "big.md").write_text("x" * 5000, encoding="utf-8")
    outside = tmp_path / "outside.txt"
    outside.write_text("outside", encoding="utf-8")
    (folder / "escape.txt").symlink_to(outside)
    (folder / "alias.md").symlink_to(folder / "notes.txt")
    skill = SkillCatalog([root]).refresh().get("tool")
    assert skill is not None
    return skill


EXPECTED_FILES = (
    "alias.md",
    "big.md",
    "blob.bin",
    "notes.txt",
    "references/guide.md",
    "scripts/deep/run.py",
)


def test_supporting_files_are_listed_without_hidden_or_escaping_ones(folder_skill: Skill) -> None:
    assert folder_skill.files == EXPECTED_FILES
    assert list_skill_files(folder_skill) == EXPECTED_FILES


async def test_supporting_files_are_listed_fresh(folder_skill: Skill) -> None:
    (Path(folder_skill.path).parent / "references" / "more.md").write_text("m", encoding="utf-8")
    listed = await alist_skill_files(folder_skill)
    assert "references/more.md" in listed


async def test_a_file_added_to_the_skill_folder_shows_in_the_next_snapshot(
    folder_skill: Skill,
) -> None:
    folder = Path(folder_skill.path).parent
    catalog = SkillCatalog([folder.parent])
    first = catalog.refresh()
    (folder / "added.md").write_text("added", encoding="utf-8")
    stamp = folder.stat().st_mtime_ns + 2_000_000_000  # timestamps may be coarse
    os.utime(folder, ns=(stamp, stamp))
    second = catalog.refresh()
    skill = second.get("tool")
    assert second is not first and second.digest == first.digest
    assert skill is not None and "added.md" in skill.files
    assert await aread_skill_text(skill, "added.md") == "added"


def test_reading_a_nested_file_and_skill_md(folder_skill: Skill) -> None:
    assert read_skill_text(folder_skill, "references/guide.md") == "line 1\nline 2\n"
    assert read_skill_text(folder_skill, "./references/guide.md") == "line 1\nline 2\n"
    assert read_skill_text(folder_skill, "alias.md") == "notes"
    assert read_skill_text(folder_skill, "SKILL.md") == skill_md("tool")


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("../x", "'..'"),
        ("references/../../x", "'..'"),
        ("/etc/passwd", "absolute"),
        ("..\\x", "backslash"),
        ("escape.txt", "leads out"),
        ("blob.bin", "binary"),
        (".secret", "hidden"),
        ("", "relative"),
        ("references", "folder"),
    ],
)
def test_reading_refuses_unsafe_or_unreadable_paths(
    folder_skill: Skill, path: str, fragment: str
) -> None:
    with pytest.raises(SkillFileError, match=re.escape(fragment)):
        read_skill_text(folder_skill, path)


def test_reading_refuses_an_oversized_file(folder_skill: Skill) -> None:
    with pytest.raises(SkillFileError) as caught:
        read_skill_text(folder_skill, "big.md", max_bytes=1000)
    assert "5,000 bytes" in str(caught.value) and "1,000 bytes" in str(caught.value)


def test_a_missing_file_lists_the_available_ones(folder_skill: Skill) -> None:
    with pytest.raises(SkillFileError) as caught:
        read_skill_text(folder_skill, "references/missing.md")
    message = str(caught.value)
    assert "references/guide.md" in message and "scripts/deep/run.py" in message


async def test_store_skill_files_are_read_from_the_item() -> None:
    store = InMemoryStore()
    put_skill(store, "b", skill_md("b"), {"references/x.md": "X text", "bin.dat": "a\x00b"})
    skill = SkillCatalog(use_store=True).refresh(store).get("b")
    assert skill is not None
    assert read_skill_text(skill, "references/x.md", store) == "X text"
    assert await aread_skill_text(skill, "SKILL.md", store) == skill_md("b")
    assert list_skill_files(skill, store) == ("bin.dat", "references/x.md")
    with pytest.raises(SkillFileError, match=re.escape("references/x.md")):
        read_skill_text(skill, "nope.md", store)
    with pytest.raises(SkillFileError, match="binary"):
        await aread_skill_text(skill, "bin.dat", store)
    with pytest.raises(SkillFileError, match=re.escape("'..'")):
        read_skill_text(skill, "../a/SKILL.md", store)
    with pytest.raises(SkillFileError, match="no Store"):
        read_skill_text(skill, "references/x.md")
    store.delete(STORE_NAMESPACE, "b")
    with pytest.raises(SkillFileError, match="no longer"):
        read_skill_text(skill, "references/x.md", store)


# --- tools -----------------------------------------------------------------------------


def test_unknown_tools_reports_exactly_the_unknown_names() -> None:
    known = parse(skill_md("a", extra="allowed-tools: read_file search grep\n"))
    free = parse(skill_md("b"))
    snapshot = SkillSnapshot.of([known, free])
    problems = unknown_tools(snapshot, ["read_file", "search"])
    assert [(p.file, p.field) for p in problems] == [("/x/SKILL.md", "allowed-tools")]
    assert problems[0].message == ("unknown tool 'grep' (the graph's tools are: read_file, search)")
    assert unknown_tools(snapshot, ["read_file", "search", "grep"]) == ()
