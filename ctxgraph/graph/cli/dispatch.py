"""Running a parsed ``ctxgraph`` command: the handler of each subcommand group.

Subcommand modules are imported when their subcommand runs, so ``--help`` and the light
subcommands do not load the graph, the model clients or the search libraries.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping

from ctxgraph.graph.cli.options import OptionError
from ctxgraph.graph.cli.parser import COMPACT_WAIT, THREAD_BUSY_EXIT, WAIT_VARIABLE

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at startup
if TYPE_CHECKING:
    from ctxgraph.state.context import Context


def thread_wait(option: str | None, environ: Mapping[str, str]) -> float:
    """Seconds to wait for a busy thread: ``--wait``, else ``CTXGRAPH_THREAD_WAIT``, else 30.

    Raises ``OptionError`` naming the option or variable when the value is not a
    non-negative number.
    """
    if option is not None:
        source, text = "--wait", option
    else:
        source, text = WAIT_VARIABLE, environ.get(WAIT_VARIABLE, "")
        if not text.strip():
            from ctxgraph.store.persistence.thread_lock import DEFAULT_WAIT

            return DEFAULT_WAIT
    return seconds_option(source, text)


def seconds_option(source: str, text: str) -> float:
    """``text`` as a number of seconds; ``OptionError`` naming ``source`` unless it is one.

    The value must be a finite, non-negative number.
    """
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise OptionError(f"{source} must be a non-negative number of seconds, got {text!r}")
    return seconds


def _context(args: argparse.Namespace) -> Context:
    from ctxgraph.state.context import Context

    return Context(user_id=args.user, agent_name=args.agent, project_id=args.project)


def _memory(args: argparse.Namespace) -> int:
    from ctxgraph.graph.cli import memory
    from ctxgraph.store.persistence.connection import open_persistence

    if args.memory_command == "process":
        from ctxgraph.nodes.memory.worker import worker_from_env

        extractor, settings = worker_from_env(os.environ)  # fails before opening the database
        with open_persistence() as persistence:
            return memory.process_memory(persistence.store, extractor, settings, sys.stdout)
    from ctxgraph.state.settings import Settings

    if args.memory_command == "import":
        return _memory_import(args)
    context = _context(args)
    # The settings the CLI's graph uses (search ranks with them), read before the database
    # is opened; the other subcommands do not need them.
    search_settings = Settings.from_env(os.environ) if args.memory_command == "search" else None
    with open_persistence() as persistence:
        store = persistence.store
        if args.memory_command == "forget":
            wait = thread_wait(None, os.environ)
            return memory.forget_memory(persistence, context, args.key, sys.stdout, wait=wait)
        if args.memory_command == "export":
            return memory.export_memory(store, context, sys.stdout, path=args.out)
        if args.memory_command == "search":
            return memory.search_memory(
                store, context, args.query, args.limit, sys.stdout, search_settings, args.ranker
            )
        if args.memory_command == "reindex":
            return memory.reindex_memory(store, context, sys.stdout)
        return memory.list_memory(store, context, sys.stdout, problems=args.problems)


def _forget(args: argparse.Namespace) -> int:
    from ctxgraph.graph.cli.forget import forget_command
    from ctxgraph.state.context import validate_label, validate_thread_id
    from ctxgraph.store.persistence.connection import open_persistence

    validate_label("user_id", args.user)  # before the database is opened
    if args.thread is not None:
        validate_thread_id(args.thread)
    wait = thread_wait(args.wait, os.environ)
    with open_persistence() as persistence:
        return forget_command(
            persistence,
            args.user,
            fact=args.fact,
            text=args.text,
            thread_id=args.thread,
            dry_run=args.dry_run,
            wait=wait,
            out=sys.stdout,
            busy_status=THREAD_BUSY_EXIT,
        )


def _memory_import(args: argparse.Namespace) -> int:
    """``memory import``: the bundle is read and verified before the database is opened."""
    from ctxgraph.graph.cli import memory
    from ctxgraph.state.context import Context
    from ctxgraph.state.settings import Settings
    from ctxgraph.store.persistence.connection import open_persistence

    bundle = memory.read_bundle(args.file, sys.stdin)
    context = Context(
        user_id=args.user,
        agent_name=args.agent or bundle["agent_name"],
        project_id=args.project or bundle["project_id"],
    )
    threshold = Settings.from_env(os.environ).confidence_threshold
    with open_persistence() as persistence:
        return memory.import_memory(
            persistence.store,
            bundle,
            context,
            sys.stdout,
            dry_run=args.dry_run,
            threshold=threshold,
        )


def _users(args: argparse.Namespace) -> int:
    from ctxgraph.graph.cli.users import delete_user_command
    from ctxgraph.store.persistence.connection import open_persistence
    from ctxgraph.store.user_deletion import checked_user_id

    user_id = checked_user_id(args.user_id)  # before the database is opened
    wait = thread_wait(args.wait, os.environ)
    with open_persistence() as persistence:
        return delete_user_command(
            persistence, user_id, sys.stdout, dry_run=args.dry_run, wait=wait
        )


def _process_left_over_memory() -> None:
    """Finish due extractions an earlier (perhaps crashed) process left in the queue."""
    from ctxgraph.graph.cli.memory import process_due_at_start
    from ctxgraph.nodes.memory.worker import worker_from_env
    from ctxgraph.store.persistence.connection import open_persistence

    extractor, settings = worker_from_env(os.environ)  # validates the model configuration
    with open_persistence() as persistence:
        process_due_at_start(persistence.store, extractor, settings, sys.stderr)


def _chat(args: argparse.Namespace) -> int:
    from ctxgraph.graph.cli.chat import install_slash_completion, prompt_lines, run_turns
    from ctxgraph.state.context import validate_thread_id

    validate_thread_id(args.thread)  # before anything is read, written or asked of a model
    wait = thread_wait(args.wait, os.environ)
    context = _context(args)
    _process_left_over_memory()
    interactive = args.command == "chat"
    if interactive:
        install_slash_completion(os.environ)
    texts = prompt_lines("you: ", sys.stdout) if interactive else args.messages
    return run_turns(
        texts,
        context=context,
        thread_id=args.thread,
        out=sys.stdout,
        interactive=interactive,
        wait=wait,
    )


def _threads(args: argparse.Namespace) -> int:
    from ctxgraph.graph.cli.threads import (
        check_owner,
        print_artifact,
        show_thread,
        verify_thread_command,
    )
    from ctxgraph.state.context import validate_thread_id
    from ctxgraph.store.persistence.connection import open_persistence

    validate_thread_id(args.thread)  # before the database is opened
    if args.threads_command == "compact":
        from ctxgraph.graph.cli.compact import compact_command

        wait = COMPACT_WAIT if args.wait is None else seconds_option("--wait", args.wait)
        return compact_command(args.thread, args.user, wait, os.environ, sys.stdout)
    with open_persistence() as persistence:
        check_owner(persistence, args.thread, args.user)
        if args.threads_command == "verify":
            return verify_thread_command(persistence, args.thread, sys.stdout)
        if args.threads_command == "artifact":
            return print_artifact(persistence, args.thread, args.ref, sys.stdout, sys.stderr)
        show_thread(
            persistence,
            args.thread,
            sys.stdout,
            with_summary=args.summary,
            subagents=args.subagents,
            usage=args.usage,
        )
    return 0


def dispatch(args: argparse.Namespace) -> int:
    """Run the command ``args`` name (as ``build_parser`` parsed them); its exit status."""
    if args.command in ("chat", "run"):
        return _chat(args)
    if args.command == "demo":
        from ctxgraph.graph.cli.demo import run_demo
        from ctxgraph.state.context import validate_thread_id

        if args.thread is not None:
            validate_thread_id(args.thread)
        return run_demo(sys.stdout, user=args.user, thread_id=args.thread)
    if args.command == "memory":
        return _memory(args)
    if args.command == "users":
        return _users(args)
    if args.command == "forget":
        return _forget(args)
    if args.command == "skills":
        from ctxgraph.graph.cli.skills import skills_command

        return skills_command(
            args.skills_command, args.dir, getattr(args, "name", None), sys.stdout
        )
    return _threads(args)
