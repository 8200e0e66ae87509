"""``langgraph dockerfile`` turns this repository's ``langgraph.json`` into a Dockerfile.

Writing the Dockerfile needs neither Docker nor the network; building the image
(``langgraph build``) needs Docker and is not run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# Variables that would reach a tracing or analytics service.
_DROPPED_PREFIXES = ("LANGSMITH_", "LANGCHAIN_")


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    env.update({"LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "true"})
    return env


def test_langgraph_dockerfile_serves_both_graphs_from_the_installed_project(
    tmp_path: Path,
) -> None:
    executable = Path(sys.executable).parent / "langgraph"
    assert executable.exists(), f"{executable} is missing: install the dev extras"
    target = tmp_path / "Dockerfile"
    had_dockerfile = (REPO_ROOT / "Dockerfile").exists()

    finished = subprocess.run(
        [str(executable), "dockerfile", "-c", "langgraph.json", str(target)],
        cwd=REPO_ROOT,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert finished.returncode == 0, finished.stdout + finished.stderr
    dockerfile = target.read_text(encoding="utf-8")
    assert dockerfile.startswith("FROM "), dockerfile

    # The clone is copied in and installed as a package.
    assert "ADD . /deps/" in dockerfile, dockerfile
    assert "pip install" in dockerfile and "-e ." in dockerfile, dockerfile

    # Every graph of langgraph.json is served from the copied clone.
    [graphs_line] = [line for line in dockerfile.splitlines() if "LANGSERVE_GRAPHS=" in line]
    graphs = json.loads(graphs_line.split("=", 1)[1].strip("'"))
    assert set(graphs) == {"ctxgraph", "memory_worker", "compaction_worker", "forget"}
    assert graphs["ctxgraph"].endswith("/ctxgraph/graph/agent.py:graph")
    assert graphs["memory_worker"].endswith("/ctxgraph/graph/memory_worker.py:graph")
    assert graphs["compaction_worker"].endswith("/ctxgraph/graph/compaction_worker.py:graph")
    assert graphs["forget"].endswith("/ctxgraph/graph/forget_graph.py:graph")
    deps = graphs["ctxgraph"].removesuffix("/ctxgraph/graph/agent.py:graph")
    assert f"ADD . {deps}" in dockerfile, dockerfile

    # The Dockerfile went where it was asked to, not into the clone.
    assert (REPO_ROOT / "Dockerfile").exists() == had_dockerfile
