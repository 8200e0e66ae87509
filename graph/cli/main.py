"""The ``ctxgraph`` command line: chat, run, demo, threads and memory."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from ctxgraph.graph.cli.chat import prompt_lines, run_turns
from ctxgraph.graph.cli.demo import run_demo
from ctxgraph.graph.cli.memory import (
    UnknownFactError,
    export_memory,
    forget_memory,
    list_memory,
    process_due_at_start,
    process_memory,
    search_memory,
)
from ctxgraph.graph.cli.threads import UnknownThreadError, show_thread, verify_thread_command
from ctxgraph.nodes.memory.render import MemoryBudgetError
from ctxgraph.nodes.memory.worker import worker_from_env
from ctxgraph.state.context import Context, ContextError
from ctxgraph.state.models import ModelConfigError
from ctxgraph.state.settings import SettingsError
from ctxgraph.store.persistence.connection import DatabaseError, open_persistence
from ctxgraph.store.persistence.embedded import EmbeddedPostgresError
from ctxgraph.store.persistence.vector_index import EmbeddingConfigError

USER_ERRORS = (
    ModelConfigError,
    SettingsError,
    ContextError,
    EmbeddedPostgresError,
    DatabaseError,
    UnknownThreadError,
    UnknownFactError,
    EmbeddingConfigError,
    MemoryBudgetError,
)


def _identity_arguments(parser: argparse.ArgumentParser, *, thread: bool = True) -> None:
    parser.add_argument("--user", required=True, help="user id (whose thread and memory)")
    if thread:
        parser.add_argument("--thread", required=True, help="thread id to create or resume")
    parser.add_argument("--agent", default="default", help="agent name (default: default)")
    parser.add_argument("--project", default=None, help="project id, if any")


def _memory_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    memory = commands.add_parser("memory", help="inspect and manage long-term memory")
    memory_commands = memory.add_subparsers(dest="memory_command", required=True)
    listing = memory_commands.add_parser(
        "list", help="list the facts remembered about a user (and project)"
    )
    _identity_arguments(listing, thread=False)
    forget = memory_commands.add_parser("forget", help="delete one remembered fact by key")
    _identity_arguments(forget, thread=False)
    forget.add_argument("key", help="key of the fact to forget")
    export = memory_commands.add_parser(
        "export", help="print everything remembered for a user as JSON"
    )
    _identity_arguments(export, thread=False)
    search = memory_commands.add_parser(
        "search", help="rank the remembered facts for a query, as memory_search does"
    )
    _identity_arguments(search, thread=False)
    search.add_argument("query", help="what to look for")
    search.add_argument("--limit", type=int, default=5, help="results to show (1-10)")
    memory_commands.add_parser("process", help="run every pending (deferred) memory extraction now")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="ctxgraph", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    chat = commands.add_parser("chat", help="interactive chat on a persistent thread")
    _identity_arguments(chat)

    run = commands.add_parser("run", help="run the given messages as turns, then exit")
    _identity_arguments(run)
    run.add_argument("messages", nargs="+", help="one turn per argument")

    demo = commands.add_parser("demo", help="offline demo on the embedded Postgres")
    demo.add_argument("--user", default="demo-user")
    demo.add_argument("--thread", default=None, help="thread id (default: a new one)")

    threads = commands.add_parser("threads", help="inspect persisted threads")
    thread_commands = threads.add_subparsers(dest="threads_command", required=True)
    show = thread_commands.add_parser(
        "show", help="print a thread's full transcript (archive and window)"
    )
    show.add_argument("thread")
    show.add_argument("--summary", action="store_true", help="also print the current summary")
    verify = thread_commands.add_parser(
        "verify", help="recompute a thread's checksums and hash chain"
    )
    verify.add_argument("thread")

    _memory_parser(commands)
    return parser


def _memory(args: argparse.Namespace) -> int:
    if args.memory_command == "process":
        extractor, settings = worker_from_env(os.environ)  # fails before opening the database
        with open_persistence() as persistence:
            return process_memory(persistence.store, extractor, settings, sys.stdout)
    context = Context(user_id=args.user, agent_name=args.agent, project_id=args.project)
    with open_persistence() as persistence:
        if args.memory_command == "forget":
            return forget_memory(persistence.store, context, args.key, sys.stdout)
        if args.memory_command == "export":
            return export_memory(persistence.store, context, sys.stdout)
        if args.memory_command == "search":
            return search_memory(persistence.store, context, args.query, args.limit, sys.stdout)
        return list_memory(persistence.store, context, sys.stdout)


def _process_left_over_memory() -> None:
    """Finish due extractions an earlier (perhaps crashed) process left in the queue."""
    extractor, settings = worker_from_env(os.environ)  # validates the model configuration
    with open_persistence() as persistence:
        process_due_at_start(persistence.store, extractor, settings, sys.stderr)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command in ("chat", "run"):
        context = Context(user_id=args.user, agent_name=args.agent, project_id=args.project)
        _process_left_over_memory()
        interactive = args.command == "chat"
        texts = prompt_lines("you: ", sys.stdout) if interactive else args.messages
        return run_turns(
            texts, context=context, thread_id=args.thread, out=sys.stdout, interactive=interactive
        )
    if args.command == "demo":
        return run_demo(sys.stdout, user=args.user, thread_id=args.thread)
    if args.command == "memory":
        return _memory(args)
    with open_persistence() as persistence:
        if args.threads_command == "verify":
            return verify_thread_command(persistence, args.thread, sys.stdout)
        show_thread(persistence, args.thread, sys.stdout, with_summary=args.summary)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ctxgraph`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="ctxgraph: %(message)s")
    try:
        return _dispatch(args)
    except USER_ERRORS as error:
        print(f"ctxgraph: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader (e.g. `| head`) stopped reading
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0
