"""Every code block of README.md and docs/*.md that can run offline runs, as written.

A fenced block is run when its language is ``python`` or ``bash`` and the line before its
fence is not a ``<!-- not-run: reason -->`` comment. The Python blocks of one page run in
order in one interpreter with a shared namespace, so a block may use what an earlier block
of its page defined; the bash blocks of a page run one after another in one shell. Both
run from the repository root with the scripted model (``CTXGRAPH_MODEL=scripted``) on the
test session's Postgres (``DATABASE_URI``), so ``open_persistence()`` and the ``ctxgraph``
commands use the test database. Other languages (``text``, ``markdown``, ``mermaid``,
``json``) are shown, never run. The site itself must build with ``mkdocs build --strict``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
RUN_LANGUAGES = {"python", "bash"}
SHOWN_LANGUAGES = {"text", "markdown", "mermaid", "json"}
NOT_RUN = re.compile(r"^\s*<!-- not-run: (?P<reason>\S.*?) -->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
PAGE_TIMEOUT = 180

RUNNER = r"""
import json, sys, traceback, warnings
# A docs example that uses a deprecated ctxgraph keyword fails, as a test would.
warnings.filterwarnings(
    "error", ".*is deprecated and will be removed in the next release", DeprecationWarning
)
blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
for block in blocks:
    print(f"--- {block['where']} ---", flush=True)
    try:
        exec(compile(block["code"], block["where"], "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"FAILED: {block['where']}", file=sys.stderr, flush=True)
        sys.exit(1)
"""


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    language: str
    code: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, with the not-run reason on the line before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent = len(opening["indent"])
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{page}:{index + 1}: the code block is never closed"
        code = "\n".join(line[indent:] for line in lines[index + 1 : end]) + "\n"
        previous = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        marker = NOT_RUN.match(previous)
        found.append(
            Block(page, index + 1, opening["lang"], code, marker["reason"] if marker else None)
        )
        index = end + 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO_ROOT))


def runnable(page: Path, language: str) -> list[Block]:
    return [b for b in blocks_of(page) if b.language == language and b.not_run is None]


def test_every_block_says_whether_it_runs() -> None:
    assert len(PAGES) > 10 and ALL_BLOCKS
    for block in ALL_BLOCKS:
        known = RUN_LANGUAGES | SHOWN_LANGUAGES
        assert block.language in known, (
            f"{block.where}: give the fence a language, one of {sorted(known)}"
        )
        if block.not_run is not None:
            assert block.language in RUN_LANGUAGES, (
                f"{block.where}: a {block.language} block is never run; drop its not-run mark"
            )
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if line.lstrip().startswith("<!-- not-run"):
                assert NOT_RUN.match(line), f"{page_id(page)}:{number}: malformed not-run mark"
                following = next((x for x in lines[number:] if x.strip()), "")
                assert FENCE.match(following), (
                    f"{page_id(page)}:{number}: a not-run mark must stand right before a fence"
                )


def test_readme_opens_with_the_two_commands() -> None:
    readme = blocks_of(REPO_ROOT / "README.md")
    demo, tests = readme[0].code.strip(), readme[1].code.strip()
    assert demo.endswith("ctxgraph demo"), demo
    assert tests.endswith("python -m pytest -q"), tests
    assert tests in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_readme_links_reach_the_docs() -> None:
    """The README is outside the site, so mkdocs does not check its links; this does."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", readme)
    assert links
    for target, anchor in links:
        path = REPO_ROOT / target
        assert path.is_file(), f"README.md links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M)
            slugs = {slug(heading) for heading in headings}
            assert anchor in slugs, f"README.md links to {target}#{anchor}: no such heading"


def slug(heading: str) -> str:
    """The anchor mkdocs gives a heading."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p, "python")], ids=page_id)
def test_python_blocks_run(page: Path, subprocess_env: dict[str, str], tmp_path: Path) -> None:
    blocks = [{"where": b.where, "code": b.code} for b in runnable(page, "python")]
    env = {**subprocess_env, "CTXGRAPH_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(blocks),
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
    )
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-8000:]}"


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p, "bash")], ids=page_id)
def test_bash_blocks_run(page: Path, subprocess_env: dict[str, str], tmp_path: Path) -> None:
    env = {**subprocess_env, "CTXGRAPH_HOME": str(tmp_path / "home")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    for block in runnable(page, "bash"):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.code],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PAGE_TIMEOUT,
        )
        assert done.returncode == 0, f"{block.where}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def test_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs, "mkdocs is missing: install the dev extras"
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
