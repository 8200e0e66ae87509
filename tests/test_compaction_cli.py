"""``ctxgraph threads compact``: a background compaction job run from the command line."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import pytest

from ctxgraph.state.settings import Settings
from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import run_ctxgraph

FILLER = (
    "The warehouse scanned the parcel at the north dock, the carrier confirmed the pickup "
    "window for the morning, and the customs broker asked for the signed invoice before "
    "the container leaves the yard; keep the pallet count, the seal number and the "
    "delivery address exactly as written in the booking, and call the driver when the "
    "truck is loaded."
)
"""About seventy words; a turn carries it twice, so a summary plus the ``read_history``
schema that the first compaction binds is clearly smaller than the turns it folds."""


def turn(n: int) -> str:
    return f"Turn {n}: parcel P-{n:04d} goes to dock {n % 7}. {FILLER} {FILLER}"


def background_env(env: dict[str, str]) -> dict[str, str]:
    """Background compaction; a job is due at 0.7 of 14 messages, the trigger fires at 14."""
    return {
        **env,
        "CTXGRAPH_COMPACTION_MODE": "background",
        "CTXGRAPH_MEMORY_EXTRACTION": "off",
        "CTXGRAPH_TRIGGER_MESSAGES": "14",
        "CTXGRAPH_KEEP_MESSAGES": "2",
    }


def run_turns(python: str, env: dict[str, str], thread: str, *numbers: int) -> None:
    texts = [turn(n) for n in numbers]
    result = run_ctxgraph(python, env, "run", "--user", "u1", "--thread", thread, *texts)
    assert result.returncode == 0, result.stderr
    assert "background compaction job(s)" not in result.stderr


def compaction_version(persistence: Persistence, thread: str) -> int:
    """The committed compaction version of the thread's latest checkpoint."""
    saved = persistence.checkpointer.get_tuple({"configurable": {"thread_id": thread}})
    assert saved is not None
    mark = saved.checkpoint["channel_values"].get("compaction") or {}
    return int(mark.get("version", 0))


READY = re.compile(
    r"^background compaction: a job result is ready \(folds (\d+) messages of v0, stored "
    r"\S+\); the next turn that reaches a trigger applies it$",
    re.MULTILINE,
)


def test_compact_stores_a_result_that_the_trigger_applies(
    python: str, subprocess_env: dict[str, str], thread_id: str, persistence: Persistence
) -> None:
    env = background_env(subprocess_env)
    # 8 messages: each request stays below 0.7 of the trigger, so no job starts in the run.
    run_turns(python, env, thread_id, 1, 2, 3, 4)

    compacted = run_ctxgraph(python, env, "threads", "compact", thread_id, "--user", "u1")
    assert compacted.returncode == 0, compacted.stderr
    finished = re.fullmatch(
        rf"thread {thread_id}: background compaction job finished in \d+\.\d s: it folds "
        r"(\d+) messages of v0; the next turn that reaches a trigger applies it\n",
        compacted.stdout,
    )
    assert finished, compacted.stdout
    folded = finished.group(1)

    refused = run_ctxgraph(python, env, "threads", "compact", thread_id, "--user", "u2")
    assert refused.returncode == 2 and refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1 and "u2" in refused.stderr, refused.stderr

    shown = run_ctxgraph(python, env, "threads", "show", thread_id, "--summary")
    assert shown.returncode == 0, shown.stderr
    ready = READY.search(shown.stdout)
    assert ready and ready.group(1) == folded, shown.stdout
    assert shown.stdout.endswith(ready.group(0) + "\n")

    again = run_ctxgraph(python, env, "threads", "compact", thread_id)
    assert again.returncode == 0, again.stderr
    assert again.stdout == (
        f"thread {thread_id}: a compaction job result is already stored (folds {folded} "
        "messages of v0); the next turn that reaches a trigger applies it\n"
    )

    # One turn at a time until the result is applied: at the trigger (turn 7, when the
    # request reaches 14 messages) at the latest.
    for n in range(5, 8):
        run_turns(python, env, thread_id, n)
        if compaction_version(persistence, thread_id) == 1:
            break
    assert compaction_version(persistence, thread_id) == 1
    plain = run_ctxgraph(python, env, "threads", "show", thread_id)
    assert plain.returncode == 0, plain.stderr
    assert f"──── compaction v1: the {folded} messages above were folded" in plain.stdout
    assert "compaction v2" not in plain.stdout
    verified = run_ctxgraph(python, env, "threads", "verify", thread_id)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    after = run_ctxgraph(python, env, "threads", "show", thread_id, "--summary")
    assert after.returncode == 0, after.stderr
    assert "current summary (v1)" in after.stdout
    assert "background compaction:" not in after.stdout


def test_a_job_started_by_run_stores_its_result_before_run_exits(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    env = background_env(subprocess_env)
    run_turns(python, env, thread_id, 1, 2, 3, 4, 5)  # the fifth request starts a job
    shown = run_ctxgraph(python, env, "threads", "show", thread_id, "--summary")
    ready = READY.search(shown.stdout)
    assert ready, shown.stdout
    again = run_ctxgraph(python, env, "threads", "compact", thread_id)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"thread {thread_id}: a compaction job result is already")


def test_compact_on_a_short_thread_has_nothing_to_fold(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    env = background_env(subprocess_env)
    run_turns(python, env, thread_id, 1)
    result = run_ctxgraph(python, env, "threads", "compact", thread_id)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"thread {thread_id}: nothing old enough to fold\n"


@pytest.mark.parametrize(
    ("args", "variables", "message"),
    [
        (
            ["no-such-thread-compact"],
            {},
            "ctxgraph: no thread 'no-such-thread-compact' has been saved in this database",
        ),
        (
            ["some-thread", "--wait", "soon"],
            {},
            "ctxgraph: --wait must be a non-negative number of seconds, got 'soon'",
        ),
        (
            ["some-thread"],
            {"CTXGRAPH_COMPACTION_MODE": "inline"},
            "ctxgraph: threads compact stores a result that only background compaction "
            "applies: set CTXGRAPH_COMPACTION_MODE=background",
        ),
    ],
)
def test_compact_user_errors_are_one_line(
    python: str,
    subprocess_env: dict[str, str],
    args: list[str],
    variables: dict[str, str],
    message: str,
) -> None:
    env = {**background_env(subprocess_env), **variables}
    result = run_ctxgraph(python, env, "threads", "compact", *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == message + "\n"


def test_compact_without_a_model_fails_before_the_database(
    python: str, subprocess_env: dict[str, str]
) -> None:
    env = background_env(subprocess_env)
    env.pop("CTXGRAPH_MODEL")
    env["DATABASE_URI"] = "postgresql://nobody@127.0.0.1:1/none"  # never opened
    result = run_ctxgraph(python, env, "threads", "compact", "some-thread")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxgraph: "), result.stderr
    assert "CTXGRAPH_MODEL" in lines[0]


def test_chat_and_run_wait_for_jobs_then_name_the_abandoned_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ctxgraph.graph.cli.chat import settle_compaction_jobs
    from ctxgraph.nodes.compaction import background

    waited: list[float] = []
    still = [0]

    def wait_for_jobs(timeout: float) -> int:
        waited.append(timeout)
        return still[0]

    monkeypatch.setattr(background, "wait_for_jobs", wait_for_jobs)
    settings = Settings(background_wait_s=7.5, compaction_lease_s=90)
    err = io.StringIO()
    assert settle_compaction_jobs(settings, err) == 0
    assert err.getvalue() == ""
    still[0] = 2
    assert settle_compaction_jobs(settings, err, wait=False) == 2
    assert waited == [7.5, 0.0]
    assert err.getvalue() == (
        "warning: 2 background compaction job(s) still running were abandoned; their "
        "leases expire in 90 s\n"
    )


@pytest.mark.parametrize(
    ("stop", "waited"), [(False, [Settings().background_wait_s]), (True, [0.0])]
)
def test_a_session_gives_jobs_their_wait_unless_it_was_interrupted(
    monkeypatch: pytest.MonkeyPatch,
    subprocess_env: dict[str, str],
    thread_id: str,
    stop: bool,
    waited: list[float],
) -> None:
    from ctxgraph.graph.cli.chat import run_turns
    from ctxgraph.graph.cli.exit_status import SIGINT_EXIT
    from ctxgraph.nodes.compaction import background
    from ctxgraph.state.context import Context

    timeouts: list[float] = []
    monkeypatch.setattr(background, "wait_for_jobs", lambda t: timeouts.append(t) or 0)
    for name, value in background_env(subprocess_env).items():
        monkeypatch.setenv(name, value)

    def typed() -> Iterator[str]:
        yield turn(1)
        if stop:
            raise KeyboardInterrupt  # Ctrl-C at the prompt
        yield "/exit"

    out = io.StringIO()
    status = run_turns(
        typed(), context=Context(user_id="u1"), thread_id=thread_id, out=out, interactive=True
    )
    assert status == (SIGINT_EXIT if stop else 0), out.getvalue()
    assert timeouts == waited
