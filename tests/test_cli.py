"""The ``ctxgraph`` command line, run as a user would run it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ctxgraph.graph.cli.demo import FIRST_PROCESS_TURNS
from tests.support.cli import REPO_ROOT, run_ctxgraph


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any model or database configuration."""
    drop = ("OPENAI_", "CTXGRAPH_", "DATABASE_URI")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


def test_demo_runs_offline_on_embedded_postgres(python: str, ctxgraph_home: Path) -> None:
    env = clean_env(CTXGRAPH_HOME=str(ctxgraph_home))
    demo = run_ctxgraph(python, env, "demo", "--thread", "demo-test")
    assert demo.returncode == 0, demo.stderr
    out = demo.stdout
    assert "== process 1: 4 turns in a new Python process" in out
    assert re.search(r"← calculator \[call_[0-9a-f-]{8}\]: 391", out)
    # The example skills: a /trip-budget activation that still uses the calculator, and a
    # skill the model loads itself because the user names it.
    assert f"skills: the examples in {REPO_ROOT / 'examples' / 'skills'}" in out
    assert "you: /trip-budget What is 180 * 7?\n" in out
    assert (
        "assistant: The calculator says 1260. I followed the trip-budget skill you activated "
        "with /trip-budget.\n"
    ) in out
    assert re.search(r'→ load_skill\(\{"name": "packing-list"\}\) \[call_', out)
    assert re.search(r"← load_skill \[call_[0-9a-f-]{8}\]: Skill packing-list loaded \(ref ", out)
    assert (
        "assistant: I loaded the packing-list skill and will follow it. Its first step: "
        "\"Work out the trip's dates, its season at the destination, and what the user plans "
        'to do."\n'
    ) in out
    assert "Resuming thread demo-test (14 messages). Last 6 messages:" in out
    # The second process compacts: the Kyoto turn is folded, and the answer finds it
    # through the summary; the archive keeps every message and verifies.
    assert "thread demo-test: 16 messages (14 archived in 1 compaction, 2 in the window)" in out
    assert "──── compaction v1: the 14 messages above were folded" in out
    recall = "From the summary of older turns: I am planning a trip to Kyoto in April."
    assert out.index("process 1 exited") < out.index(recall)
    # The active skills survive the compaction: the request still names them.
    active = f"assistant: {recall} Active skills: trip-budget, packing-list.\n"
    assert out.index("process 1 exited") < out.index(active)
    assert "active skills: trip-budget, packing-list\n" in out
    assert "thread demo-test: intact (1 compaction version verified" in out
    # A new thread of the same user gets the fact learned in the first one back.
    remembered = "From long-term memory: [preference] I prefer quiet hotels near a train station."
    assert out.index("== process 3") < out.index(remembered)
    assert (ctxgraph_home / "pgdata" / "PG_VERSION").exists()

    # The trip paragraph is printed once in full (as the user's turn); the assistant
    # acknowledges it by its first sentence and later listings show one line per message.
    trip = FIRST_PROCESS_TURNS[0]
    assert out.count(trip) == 1
    assert out.count("Philosopher's Path") == 1
    assert "assistant: Noted: I am planning a trip to Kyoto in April.\n" in out
    assert not re.search(r"(?<![\d.])1 (?:compactions|messages|turns|tool calls|versions)\b", out)

    # The summary points at the ledger, the demo prints both and names the command.
    ledger = out[out.index("current summary (v1):") : out.index("== integrity")]
    assert "threads show <thread> --summary" in ledger
    assert "ledger (recorded by code" in ledger
    assert "- [succeeded] calculator ×2 (read-only), turns 2–3, latest: expression=180 * 7\n" in (
        ledger
    )
    assert "USER CONSTRAINTS (verbatim):\n- Keep the hotel under 180 euros a night.\n" in ledger
    assert "- Never book anything that cannot be cancelled." in ledger
    assert "`ctxgraph threads show demo-test --summary` prints this summary and ledger" in out

    # The demo's thread is still there for a later process, in full.
    shown = run_ctxgraph(python, env, "threads", "show", "demo-test")
    assert shown.returncode == 0, shown.stderr
    assert f"[16] assistant: {recall} Active skills: trip-budget, packing-list." in shown.stdout
    assert "active skills: trip-budget, packing-list\n" in shown.stdout
    assert shown.stdout.count(trip) == 1
    assert "current summary" not in shown.stdout and "ledger" not in shown.stdout
    with_summary = run_ctxgraph(python, env, "threads", "show", "demo-test", "--summary")
    assert with_summary.returncode == 0, with_summary.stderr
    assert with_summary.stdout.endswith(ledger.split("\n(`ctxgraph threads show")[0] + "\n")


def test_chat_streams_and_resumes_after_restart(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    first = run_ctxgraph(
        python,
        subprocess_env,
        "chat",
        "--user",
        "u1",
        "--thread",
        thread_id,
        stdin="What is 12 * 12?\n/exit\nnever sent\n",
    )
    assert first.returncode == 0, first.stderr
    assert f"New thread {thread_id}." in first.stdout
    assert re.search(r"→ calculator\(\{\"expression\": \"12 \* 12\"\}\)", first.stdout)
    assert "assistant: The calculator says 144." in first.stdout
    assert "never sent" not in first.stdout.split("/exit")[1]

    second = run_ctxgraph(
        python,
        subprocess_env,
        "chat",
        "--user",
        "u1",
        "--thread",
        thread_id,
        stdin="What did I say before?\n",
    )
    assert second.returncode == 0, second.stderr
    assert f"Resuming thread {thread_id} (4 messages)" in second.stdout
    assert '"What is 12 * 12?"' in second.stdout


def test_chat_without_a_model_fails_with_one_line(python: str, ctxgraph_home: Path) -> None:
    env = clean_env(CTXGRAPH_HOME=str(ctxgraph_home))
    result = run_ctxgraph(python, env, "chat", "--user", "u", "--thread", "t", stdin="hi\n")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "CTXGRAPH_MODEL" in lines[0]
    assert "OPENAI_API_KEY" in lines[0]
    assert "OPENAI_BASE_URL" in lines[0]
    assert not ctxgraph_home.exists(), "the database was started before the model was checked"


def test_threads_show_unknown_thread(python: str, subprocess_env: dict[str, str]) -> None:
    result = run_ctxgraph(python, subprocess_env, "threads", "show", "no-such-thread")
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "ctxgraph: no thread 'no-such-thread' has been saved in this database"
    )


def test_bad_user_id_is_named(python: str, subprocess_env: dict[str, str]) -> None:
    result = run_ctxgraph(python, subprocess_env, "run", "--user", "a b", "--thread", "t", "hi")
    assert result.returncode == 2
    assert "Context.user_id" in result.stderr
