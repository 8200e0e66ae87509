"""The ``ctxgraph`` argument parser: every subcommand, its options and its help.

It also names what the help promises: the exit statuses and the variables read.
"""

from __future__ import annotations

import argparse
import os
import sys

from ctxgraph.graph.cli.options import SEARCH_LIMITS

USER_ERROR_EXIT = 2
"""Exit status of a user error (bad option, variable, configuration or name)."""

THREAD_BUSY_EXIT = 3
"""Exit status of ``chat`` and ``run`` when another run kept the thread past ``--wait``."""

MODEL_ERROR_EXIT = 4
"""Exit status when a model endpoint fails (refused, DNS, TLS, HTTP error, timeout)."""

DEBUG_VARIABLE = "CTXGRAPH_DEBUG"
"""Environment variable that, set to 1, shows tracebacks as ``--debug`` does."""

WAIT_VARIABLE = "CTXGRAPH_THREAD_WAIT"
"""Environment variable with the default of ``--wait``."""

THREAD_HELP = "the thread id (as given to chat or run with --thread)"
"""Help of the ``thread`` argument of the ``threads`` subcommands."""

COMPACT_WAIT = 300.0
"""Default of ``threads compact --wait``: seconds to wait for the compaction job."""

EXIT_STATUSES = (
    "exit status: 0 success; 1 a failure the command reports (threads verify: broken; "
    "threads compact: the job is still running or ended without a result; skills list: "
    "problems found); "
    f"{USER_ERROR_EXIT} a user error (one line on stderr); {THREAD_BUSY_EXIT} (chat, run) "
    "another run kept the thread busy for --wait seconds, and the waiting turn wrote nothing; "
    f"{MODEL_ERROR_EXIT} a model endpoint failed (one line naming the role, endpoint and "
    "cause; --debug or CTXGRAPH_DEBUG=1 shows the traceback); 130 interrupted (Ctrl-C); "
    "143 terminated (SIGTERM)"
)


def _help_formatter(prog: str) -> argparse.HelpFormatter:
    """The standard help formatter, as wide as the terminal.

    argparse finds the width with ``shutil``, whose import (with bz2 and lzma) costs
    more than the rest of ``--help``; this reads it the same way with ``os`` alone.
    """
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    stdout = sys.__stdout__
    if columns <= 0 and stdout is not None:
        try:
            columns = os.get_terminal_size(stdout.fileno()).columns
        except (ValueError, OSError):
            columns = 0
    return argparse.HelpFormatter(prog, width=(columns or 80) - 2)


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, description: str
) -> argparse.ArgumentParser:
    """Add the subcommand ``name``, described by ``description`` in the help."""
    return commands.add_parser(name, help=description, formatter_class=_help_formatter)


def _identity_arguments(parser: argparse.ArgumentParser, *, thread: bool = True) -> None:
    parser.add_argument("--user", required=True, help="user id (whose thread and memory)")
    if thread:
        parser.add_argument("--thread", required=True, help="thread id to create or resume")
    parser.add_argument("--agent", default="default", help="agent name (default: default)")
    parser.add_argument("--project", default=None, help="project id, if any")


def _verbose_argument(parser: argparse.ArgumentParser, default: object = argparse.SUPPRESS) -> None:
    """``--verbose``, on the command line and, without a default, on a subcommand too."""
    # A subcommand's default would replace the value given before the subcommand.
    parser.add_argument(
        "--verbose",
        action="store_true",
        default=default,
        help="also show routine notices on stderr as 'note: ...' lines (compaction skipped "
        "or discarded, background job steps); warnings show as 'warning: ...' either way",
    )


def _wait_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--wait",
        metavar="SECONDS",
        default=None,
        help=f"how long {what} may wait while another run holds the thread (default: "
        f"${WAIT_VARIABLE}, else 30); then exit with status {THREAD_BUSY_EXIT}",
    )


def search_limit(text: str) -> int:
    """``memory search --limit``: a whole number in ``SEARCH_LIMITS``, else a usage error."""
    low, high = SEARCH_LIMITS
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from {low} to {high}, got {text!r}"
        )
    return value


def _memory_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    memory = _command(commands, "memory", "inspect and manage long-term memory")
    memory_commands = memory.add_subparsers(dest="memory_command", required=True)
    listing = _command(
        memory_commands, "list", "list the facts remembered about a user (and project)"
    )
    _identity_arguments(listing, thread=False)
    listing.add_argument(
        "--problems",
        action="store_true",
        help="list the malformed stored items (namespace, key, problem) every reader skips",
    )
    forget = _command(
        memory_commands,
        "forget",
        "forget one remembered fact by key: a user's fact also from every thread of the "
        "user (as 'ctxgraph forget --fact'), printing a receipt; a project fact is deleted",
    )
    _identity_arguments(forget, thread=False)
    forget.add_argument("key", help="key of the fact to forget")
    export = _command(
        memory_commands,
        "export",
        "write everything remembered for a user as a memory bundle (JSON with digests)",
    )
    _identity_arguments(export, thread=False)
    export.add_argument(
        "--out", metavar="FILE", default=None, help="write the bundle to FILE (default: stdout)"
    )
    bundle_import = _command(
        memory_commands,
        "import",
        "import a memory bundle (from memory export) into a user's memory; a bundle whose "
        "digests do not match is refused whole",
    )
    bundle_import.add_argument("file", metavar="FILE", help="the bundle; - reads stdin")
    bundle_import.add_argument("--user", required=True, help="user id whose memory receives it")
    bundle_import.add_argument(
        "--agent", default=None, help="agent of the user facts (default: the bundle's)"
    )
    bundle_import.add_argument(
        "--project", default=None, help="project of the project facts (default: the bundle's)"
    )
    bundle_import.add_argument(
        "--dry-run", action="store_true", help="report what would be imported, write nothing"
    )
    search = _command(
        memory_commands, "search", "rank the remembered facts for a query, as memory_search does"
    )
    _identity_arguments(search, thread=False)
    search.add_argument("query", help="what to look for")
    low, high = SEARCH_LIMITS
    search.add_argument(
        "--limit", type=search_limit, default=5, help=f"results to show ({low}-{high})"
    )
    search.add_argument(
        "--ranker",
        metavar="MODULE:ATTRIBUTE",
        default=None,
        help="rank with this ranker (ctxgraph.store.memory.ranking.Ranker), as a graph "
        "built with MemoryPart(ranker=...) does (default: the built-in ranking)",
    )
    _command(memory_commands, "process", "run every pending (deferred) memory extraction now")
    reindex = _command(
        memory_commands,
        "reindex",
        "embed the user's (and project's) facts stored without a vector, e.g. while the "
        "embedding endpoint was down (needs CTXGRAPH_EMBEDDING_MODEL)",
    )
    _identity_arguments(reindex, thread=False)


def _forget_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    forget = _command(
        commands,
        "forget",
        "forget a fact or a text everywhere the user's data holds it (memory, thread "
        "windows, summaries, archive, artifacts, jobs, older checkpoints) and print a receipt",
    )
    forget.add_argument("--user", required=True, help="user id whose data is searched")
    what = forget.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--fact",
        metavar="KEY",
        help="key of a remembered fact: its content, evidence, history and the numbers, "
        "e-mail addresses and links in them",
    )
    what.add_argument("--text", help="a text to forget (at least three characters)")
    forget.add_argument(
        "--thread", default=None, help="search only this thread of the user (and the memory)"
    )
    forget.add_argument("--dry-run", action="store_true", help="list the places, change nothing")
    _wait_argument(forget, "each thread")


def _users_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    users = _command(commands, "users", "manage users")
    user_commands = users.add_subparsers(dest="users_command", required=True)
    delete = _command(
        user_commands,
        "delete",
        "delete a user: every thread it owns (checkpoints, archive, artifacts, jobs, lease), "
        "its memory and profile, its queued extractions, and the project facts of its "
        "threads; prints a receipt with a count per place",
    )
    delete.add_argument("user_id", metavar="USER", help="the user id to delete")
    delete.add_argument(
        "--dry-run", action="store_true", help="print what would be deleted, delete nothing"
    )
    _wait_argument(delete, "the deletion of each thread")


def _skills_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    skills = _command(
        commands, "skills", "list and inspect the skills of the skill folders (no database)"
    )
    skill_commands = skills.add_subparsers(dest="skills_command", required=True)
    listing = _command(
        skill_commands,
        "list",
        "list every skill (name, description, allowed tools, ref), then every problem; "
        "exit status 1 when there are problems",
    )
    show = _command(
        skill_commands, "show", "print one skill: front matter, supporting files and body"
    )
    show.add_argument("name", help="the skill's name")
    for command in (listing, show):
        command.add_argument(
            "--dir",
            action="append",
            metavar="PATH",
            default=None,
            help="a folder of skill folders; repeatable; replaces $CTXGRAPH_SKILLS_DIRS",
        )


def _threads_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    threads = _command(commands, "threads", "inspect persisted threads")
    thread_commands = threads.add_subparsers(dest="threads_command", required=True)
    show = _command(
        thread_commands, "show", "print a thread's full transcript (archive and window)"
    )
    show.add_argument("thread", help=THREAD_HELP)
    show.add_argument(
        "--summary",
        action="store_true",
        help="also print the current summary and its ledger (tool-call states, user "
        "constraints and identifiers recorded by code)",
    )
    show.add_argument(
        "--subagents",
        action="store_true",
        help="also print each delegation (task call): its status, brief and the "
        "subagent's transcript, read from its checkpoint or transcript artifact",
    )
    show.add_argument(
        "--usage",
        action="store_true",
        help="also print what the thread's model calls cost per role (main, summary, "
        "memory, subagent): calls, input, output and cached tokens, and how many calls "
        "were counted locally",
    )
    verify = _command(thread_commands, "verify", "recompute a thread's checksums and hash chain")
    verify.add_argument("thread", help=THREAD_HELP)
    artifact = _command(
        thread_commands,
        "artifact",
        "print the full content of an offloaded tool result, tool argument or user input",
    )
    artifact.add_argument("thread", help=THREAD_HELP)
    artifact.add_argument("ref", help="the artifact's ref (art-...), as threads show names it")
    compact = _command(
        thread_commands,
        "compact",
        "summarize the thread's old messages now, as a background compaction job does, "
        "and wait for the result; the next turn that reaches a trigger applies it without "
        "a summary call (needs CTXGRAPH_COMPACTION_MODE=background; the thread is not "
        "held, so a chat may run meanwhile); exit status 1 when the job is still running "
        "after --wait or ends without a result",
    )
    compact.add_argument("thread", help=THREAD_HELP)
    compact.add_argument(
        "--wait",
        metavar="SECONDS",
        default=None,
        help=f"seconds to wait for the job's result (default: {COMPACT_WAIT:g}); then exit "
        "with status 1",
    )
    for command in (show, verify, artifact, compact):
        command.add_argument(
            "--user",
            default=None,
            help="refuse the thread unless this user owns it (default: no owner check)",
        )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="ctxgraph",
        description="The ctxgraph command line: chat, run, demo, threads, memory and skills.",
        epilog=EXIT_STATUSES,
        formatter_class=_help_formatter,
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"show the traceback of an error reported in one line (or set {DEBUG_VARIABLE}=1)",
    )
    _verbose_argument(parser, default=False)
    commands = parser.add_subparsers(dest="command", required=True)

    chat = _command(commands, "chat", "interactive chat on a persistent thread")
    _identity_arguments(chat)
    _wait_argument(chat, "each turn")
    _verbose_argument(chat)

    run = _command(commands, "run", "run the given messages as turns, then exit")
    _identity_arguments(run)
    _wait_argument(run, "the turns")
    _verbose_argument(run)
    run.add_argument(
        "messages", nargs="+", help="one turn per argument; - reads one message from stdin"
    )

    demo = _command(commands, "demo", "offline demo on the embedded Postgres")
    demo.add_argument(
        "--user",
        default="demo-user",
        help="user id whose thread and memory the demo uses (default: demo-user)",
    )
    demo.add_argument("--thread", default=None, help="thread id (default: a new one)")

    _threads_parser(commands)
    _memory_parser(commands)
    _forget_parser(commands)
    _users_parser(commands)
    _skills_parser(commands)
    return parser
