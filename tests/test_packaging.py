"""The wheel installs one import namespace, ``ctxgraph``, beside a user's own modules."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import REPO_ROOT

SOURCES = ("ctxgraph", "pyproject.toml", "README.md")
"""What a build needs from the repository: the package tree, its metadata and readme."""

LAYERS = ("graph", "nodes", "state", "store")
"""The four code folders: real under ``ctxgraph/``, links at the top level for readers."""

USER_MODULES = {
    "state.py": "KIND = 'the user project state module'\n",
    "store/__init__.py": "KIND = 'the user project store package'\n",
    "graph/__init__.py": "KIND = 'the user project graph package'\n",
    "nodes.py": "KIND = 'the user project nodes module'\n",
}
"""A user project whose own top-level names collide with the repository's folder names."""

USER_SCRIPT = textwrap.dedent(
    """
    import graph, nodes, state, store
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.memory import InMemoryStore

    import ctxgraph
    from ctxgraph import Context, Settings, build_graph
    from ctxgraph.state.demo_model import demo_models
    from ctxgraph.state.demo_replies import demo_tools

    print(state.KIND, store.KIND, graph.KIND, nodes.KIND, sep="|")
    print(ctxgraph.__file__)
    app = build_graph(
        models=demo_models(),
        tools=demo_tools(),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        settings=Settings(memory_extraction="off"),
    )
    config = {"configurable": {"thread_id": "wheel-1"}}
    result = app.invoke(
        {"messages": [HumanMessage("What is 6 * 7?")]}, config, context=Context(user_id="u1")
    )
    print("ANSWER:", result["messages"][-1].content)
    """
)


def _build_wheel(workdir: Path) -> Path:
    source = workdir / "src"
    source.mkdir()
    for name in SOURCES:
        origin = REPO_ROOT / name
        if origin.is_dir():
            shutil.copytree(
                origin,
                source / name,
                symlinks=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
        else:
            shutil.copy2(origin, source / name)
    dist = workdir / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(dist),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = dist.glob("ctxgraph-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A wheel built from a copy of the repository."""
    yield _build_wheel(tmp_path_factory.mktemp("wheel"))


def _top_level_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name.split("/", 1)[0] for name in archive.namelist()}


def test_the_wheel_holds_only_the_ctxgraph_package(wheel: Path) -> None:
    names = _top_level_names(wheel)
    packages = {name for name in names if not name.endswith(".dist-info")}
    assert packages == {"ctxgraph"}, f"unexpected top-level names in the wheel: {names}"
    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
        top_level = next(n for n in files if n.endswith(".dist-info/top_level.txt"))
        assert archive.read(top_level).decode().split() == ["ctxgraph"]
        entry_points = next(n for n in files if n.endswith(".dist-info/entry_points.txt"))
        assert "ctxgraph = ctxgraph.graph.cli.main:entry" in archive.read(entry_points).decode()
    for module in ("graph/builder.py", "nodes/compaction/node.py", "state/context.py"):
        assert f"ctxgraph/{module}" in files
    assert "ctxgraph/store/memory/repository.py" in files
    assert "ctxgraph/py.typed" in files


def _checkout_modules() -> set[str]:
    package = REPO_ROOT / "ctxgraph"
    return {
        f"ctxgraph/{file.relative_to(package).as_posix()}"
        for file in package.rglob("*.py")
        if "__pycache__" not in file.parts
    }


def test_the_checkout_has_one_real_path_per_module() -> None:
    package = REPO_ROOT / "ctxgraph"
    links = [path for path in package.rglob("*") if path.is_symlink()]
    assert links == [], f"the package tree must hold real files only: {links}"
    for layer in LAYERS:
        top = REPO_ROOT / layer
        assert top.is_symlink(), f"{layer}/ should link to ctxgraph/{layer}"
        assert top.resolve() == (package / layer).resolve()


def test_the_wheel_holds_real_files_only_one_per_module(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        entries = archive.infolist()
    links = [e.filename for e in entries if stat.S_ISLNK(e.external_attr >> 16)]
    assert links == []
    names = [e.filename for e in entries]
    assert len(names) == len(set(names)), "a path appears twice in the wheel"
    modules = {name for name in names if name.endswith(".py")}
    assert modules == _checkout_modules()


def test_the_wheel_runs_a_turn_beside_a_project_with_its_own_state_and_store(
    wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    child = venv / "bin" / "python"
    # The new environment borrows this one's dependencies through a path entry (a plain
    # path line: no editable finder of this checkout is activated), then installs the wheel.
    child_site = subprocess.run(
        [str(child), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(child_site) / "borrowed_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    installed = subprocess.run(
        [str(child), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr

    project = tmp_path / "project"
    for relative, text in USER_MODULES.items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (project / "main.py").write_text(USER_SCRIPT)
    run = subprocess.run(
        [str(child), "main.py"], cwd=project, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split("|") == [
        "the user project state module",
        "the user project store package",
        "the user project graph package",
        "the user project nodes module",
    ]
    assert lines[1].startswith(child_site), lines[1]
    assert "42" in lines[-1], run.stdout

    # Nothing but ctxgraph itself landed in site-packages.
    for name in ("graph", "nodes", "state", "store"):
        assert not (Path(child_site) / name).exists(), f"site-packages has a top-level {name}"
