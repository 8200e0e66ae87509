"""``ctxgraph chat`` and ``ctxgraph run``: talk to a persistent thread from the terminal."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from types import FrameType
from typing import BinaryIO, TextIO

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from ctxgraph.graph.builder import Graph
from ctxgraph.graph.cli.exit_status import SIGINT_EXIT, SIGTERM_EXIT, exit_at_once
from ctxgraph.graph.cli.input import InputError, check_message, expand_stdin, message_limit
from ctxgraph.graph.cli.render import LINE_CHARS, escape_control, plural, transcript_lines
from ctxgraph.graph.cli.threads import check_owner
from ctxgraph.graph.cli.turns import TurnInterruptedError, stream_turn
from ctxgraph.graph.environment import EnvironmentConfig
from ctxgraph.nodes.skills.slash import RESERVED_COMMANDS
from ctxgraph.state.context import Context
from ctxgraph.state.model_errors import report_endpoint_error
from ctxgraph.state.settings import Settings
from ctxgraph.store.persistence.connection import Persistence, open_persistence
from ctxgraph.store.persistence.thread_lock import DEFAULT_WAIT, thread_lock
from ctxgraph.store.skills import SkillCatalog

EXIT_COMMANDS = {"/exit", "/quit"}
RESUME_TAIL = 6

EMPTY_NOTE = "(nothing sent: the message is empty)"
"""What ``chat`` prints for an empty line (nothing but whitespace)."""

INTERRUPTED_NOTE = "[interrupted: the partial answer is not kept; your message is]"
"""What ``chat`` and ``run`` print when a turn is interrupted."""


class TerminatedError(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C, so a turn stops the same way."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise TerminatedError


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises ``TerminatedError`` (only in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def run_turns(
    texts: Iterable[str],
    *,
    context: Context,
    thread_id: str,
    out: TextIO,
    interactive: bool,
    wait: float = DEFAULT_WAIT,
    stdin: BinaryIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run each text as one turn on ``thread_id``; in interactive mode, read turns from stdin.

    Only one run writes to a thread at a time (see ``thread_lock``): ``run`` holds the
    thread for all its turns, so they stay together and a busy thread leaves nothing
    written; ``chat`` holds it for each turn, so two chats on one thread take turns.
    Either raises ``ThreadBusyError`` when another run keeps the thread past ``wait``.

    ``run`` reads the argument ``-`` as one message from ``stdin`` (default: the process's
    standard input) and checks every message before it writes anything: text that cannot
    be encoded, or a message over a known input window, raises ``InputError`` (with the window
    unknown a large message is offloaded by the graph). ``chat``
    prints that error on ``err`` and asks again.

    Ctrl-C during a turn stops it at once: the user's message stays, the partial answer is
    dropped (see ``turns``). ``chat`` then asks for the next message; ``run`` returns 130.
    SIGTERM returns 143 from either.
    """
    configured = EnvironmentConfig.read(os.environ)
    limit = message_limit(configured)
    if not interactive:
        texts = expand_stdin(list(texts), stdin or sys.stdin.buffer)
        for number, text in enumerate(texts, start=1):
            check_message(text, limit, label=f"message {number}")
    with _sigterm_as_interrupt():
        status, abandoned = _run_session(
            texts, configured, limit, context, thread_id, out, err or sys.stderr, interactive, wait
        )
    if abandoned is not None and abandoned.is_alive():
        _exit_now(status, abandoned)
    return status


def _run_session(
    texts: Iterable[str],
    configured: EnvironmentConfig,
    limit: tuple[int, str] | None,
    context: Context,
    thread_id: str,
    out: TextIO,
    err: TextIO,
    interactive: bool,
    wait: float,
) -> tuple[int, threading.Thread | None]:
    """Open the database and run the turns; the exit status and any abandoned run.

    Before the database is closed, background compaction jobs this process started get
    ``background_wait_s`` to store their results, and background memory extractions
    ``memory_wait_s`` (neither gets any when the session was interrupted; see
    ``settle_compaction_jobs`` and ``settle_memory_extractions``).
    """
    with open_persistence() as persistence:
        graph = configured.build(checkpointer=persistence.checkpointer, store=persistence.store)
        session = _Session(graph, thread_id, context, out, interactive=interactive)
        interrupted = False  # by Ctrl-C or SIGTERM: then jobs get no time to finish
        try:
            session.turns(persistence, texts, limit, err, wait)
            return 0, session.abandoned
        except (TurnInterruptedError, KeyboardInterrupt) as stop:
            interrupted = True
            return session.stopped(stop)
        finally:
            settle_compaction_jobs(configured.settings, err, wait=not interrupted)
            settle_memory_extractions(configured.settings, err, wait=not interrupted)


def settle_compaction_jobs(settings: Settings, err: TextIO, *, wait: bool = True) -> int:
    """Give this process's background compaction jobs time to finish; how many still run.

    Waits up to ``settings.background_wait_s`` (not at all unless ``wait``), so a job
    that is about to finish stores its result before the Store is closed. Jobs still
    running are abandoned: one line on ``err`` says so and when their leases expire.
    Without jobs it returns 0 at once and prints nothing.
    """
    from ctxgraph.nodes.compaction.background import wait_for_jobs

    left = wait_for_jobs(settings.background_wait_s if wait else 0.0)
    if left:
        err.write(
            f"warning: {left} background compaction job(s) still running were abandoned; "
            f"their leases expire in {settings.compaction_lease_s:g} s\n"
        )
        err.flush()
    return left


MEMORY_GRACE = 1.0
"""Seconds the command line waits at exit for memory extractions before it says it waits."""


def settle_memory_extractions(settings: Settings, err: TextIO, *, wait: bool = True) -> int:
    """Give this process's background memory extractions time to finish; how many still run.

    With some running after ``MEMORY_GRACE``, a note on ``err`` says the command waits for
    them, up to ``settings.memory_wait_s`` in all (not at all unless ``wait``; Ctrl-C
    stops the wait). Those
    still running then stay queued in the Store, which another note says: the next
    ``chat`` or ``run`` (once the thread has been quiet for ``memory_quiet_seconds``) or
    ``ctxgraph memory process`` runs them. Without any, it returns 0 at once and prints
    nothing.
    """
    from ctxgraph.nodes.memory.runner import pending_memory, wait_for_memory

    grace = min(MEMORY_GRACE, settings.memory_wait_s) if wait else 0.0
    left = wait_for_memory(grace) if pending_memory() else 0
    if not left:
        return 0
    if wait and settings.memory_wait_s > grace:
        err.write(
            f"note: waiting up to {settings.memory_wait_s:g} s for "
            f"{plural(left, 'memory extraction')} to finish (Ctrl-C leaves {_them(left)} queued)\n"
        )
        err.flush()
        try:
            left = wait_for_memory(settings.memory_wait_s - grace)
        except KeyboardInterrupt:
            left = pending_memory()
    if left:
        err.write(
            f"note: {plural(left, 'memory extraction')} left queued; the next chat or run "
            f"(or ctxgraph memory process) finishes {_them(left)}\n"
        )
        err.flush()
    return left


def _them(count: int) -> str:
    return "it" if count == 1 else "them"


EXIT_GRACE = 0.3
"""Seconds an abandoned run may take to stop before the process exits without it."""


def _exit_now(status: int, abandoned: threading.Thread) -> None:
    """End the process with ``status`` even though an abandoned run is still in a model call.

    The run's model call sits in a worker pool that the interpreter would wait for at exit,
    until the model answers. Its node can no longer write (see ``turns``) and everything
    written so far is committed, so after a short grace the process runs its exit handlers
    (which leave the embedded Postgres) and exits at once.
    """
    abandoned.join(EXIT_GRACE)
    if not abandoned.is_alive():
        return
    exit_at_once(status)


class _Session:
    """Runs turns one after another, waiting for an interrupted turn's run to end first."""

    def __init__(
        self, graph: Graph, thread_id: str, context: Context, out: TextIO, *, interactive: bool
    ) -> None:
        self._graph = graph
        self._thread_id = thread_id
        self._config = _config(thread_id)
        self._context = context
        self._out = out
        self._interactive = interactive
        self._abandoned: threading.Thread | None = None

    def stopped(
        self, stop: TurnInterruptedError | KeyboardInterrupt
    ) -> tuple[int, threading.Thread | None]:
        """The exit status after Ctrl-C or SIGTERM ended ``turns``, and any abandoned run.

        An interrupted turn gets the interrupted note; at the prompt or between turns,
        the line is ended.
        """
        if isinstance(stop, TurnInterruptedError):
            self._out.write(INTERRUPTED_NOTE + "\n")
            self._out.flush()
            terminated = isinstance(stop.cause, TerminatedError)
            return (SIGTERM_EXIT if terminated else SIGINT_EXIT), stop.worker
        self._out.write("\n")
        self._out.flush()
        return (SIGTERM_EXIT if isinstance(stop, TerminatedError) else SIGINT_EXIT), self._abandoned

    def turns(
        self,
        persistence: Persistence,
        texts: Iterable[str],
        limit: tuple[int, str] | None,
        err: TextIO,
        wait: float,
    ) -> None:
        """Show the thread, then run a turn per text until an exit command or the end.

        ``run`` holds the thread's lock for the whole run; ``chat`` takes it per turn.
        Ctrl-C and SIGTERM propagate (see ``stopped``).
        """
        thread_id, out = self._thread_id, self._out
        with ExitStack() as whole_run:
            if not self._interactive:
                whole_run.enter_context(thread_lock(persistence, thread_id, wait=wait))
            # In chat this read is not under the lock: it reads the latest checkpoint in
            # one statement, only to show it, and each turn then starts from whatever
            # checkpoint is latest once it holds the lock.
            # Another user's thread is refused before its messages are shown.
            check_owner(persistence, thread_id, self._context.user_id)
            _show_resume(persistence, self._config, thread_id, out, interactive=self._interactive)
            for text in texts:
                if text.strip() in EXIT_COMMANDS:
                    break
                if not self._interactive:  # every text was checked: none is empty
                    out.write(f"you: {escape_control(text)}\n")
                    self.turn(text)
                    continue
                if not text.strip():
                    out.write(EMPTY_NOTE + "\n")
                    continue
                try:
                    check_message(text, limit)
                except InputError as error:
                    err.write(f"ctxgraph: {error}\n")
                    continue
                with thread_lock(persistence, thread_id, wait=wait):
                    self._chat_turn(text, err)

    def _chat_turn(self, text: str, err: TextIO) -> None:
        """One ``chat`` turn: a failed model endpoint is one line on ``err``, and chat goes on."""
        try:
            answered = self.turn(text)
        except Exception as error:
            if not report_endpoint_error(error, err):
                raise
            return
        if not answered:
            self._out.write(INTERRUPTED_NOTE + "\n")

    @property
    def abandoned(self) -> threading.Thread | None:
        """The run of the last interrupted turn, when no turn has started since."""
        return self._abandoned

    def turn(self, text: str) -> bool:
        """Run one turn; False when Ctrl-C interrupted it in ``chat`` (``chat`` goes on).

        In ``run``, and for SIGTERM, the interruption is raised as ``TurnInterruptedError``.
        """
        if self._abandoned is not None:
            # The abandoned run stops at its next model token or node event; its model
            # node then fails, so it writes no answer, but it must be over before the next
            # turn starts from the latest checkpoint.
            self._abandoned.join(EXIT_GRACE)
            if self._abandoned.is_alive():
                self._out.write("(waiting for the interrupted turn's model call to stop)\n")
                self._out.flush()
                self._abandoned.join()
            self._abandoned = None
        try:
            stream_turn(
                self._graph, text, config=self._config, context=self._context, out=self._out
            )
        except TurnInterruptedError as interrupted:
            self._abandoned = interrupted.worker
            if isinstance(interrupted.cause, TerminatedError) or not self._interactive:
                raise
            self._out.write("\n")
            return False
        return True


def _show_resume(
    persistence: Persistence,
    config: RunnableConfig,
    thread_id: str,
    out: TextIO,
    *,
    interactive: bool,
) -> None:
    """Say whether the thread is new, or show the last messages of the resumed thread.

    It reads the latest checkpoint as ``threads show`` does, without the pending writes
    of a run that stopped part-way: the next turn starts from that checkpoint too, and
    drops those writes.
    """
    saved = persistence.checkpointer.get_tuple(config)
    values = saved.checkpoint["channel_values"] if saved is not None else {}
    existing = [m for m in values.get("messages", []) if isinstance(m, BaseMessage)]
    if existing:
        start = max(0, len(existing) - RESUME_TAIL)
        shown = len(existing) - start
        last = "Last message" if shown == 1 else f"Last {shown} messages"
        name = escape_control(thread_id)
        out.write(f"Resuming thread {name} ({plural(len(existing), 'message')}). {last}:\n")
        tail = transcript_lines(existing[start:], start=start + 1, clip=LINE_CHARS)
        out.write("\n".join(tail) + "\n")
    elif interactive:
        out.write(f"New thread {escape_control(thread_id)}.\n")
    if interactive:
        out.write("Type a message; /exit or end of input quits.\n")


def prompt_lines(prompt: str, out: TextIO) -> Iterable[str]:
    """Read lines from the terminal until end of input.

    Undecodable bytes are kept as lone surrogates, so the turn's check names their position
    instead of the read failing.
    """
    if hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(errors="surrogateescape")
    terminal = sys.stdin.isatty() and out is sys.stdout
    while True:
        try:
            if terminal:
                line = input(prompt)  # readline, when loaded, then knows the prompt
            else:
                out.write(prompt)
                out.flush()
                line = input()
        except EOFError:
            out.write("\n")
            return
        if not sys.stdin.isatty():
            out.write(escape_control(line) + "\n")  # piped input is not echoed by a terminal
        yield line


def slash_completions(prefix: str, names: Iterable[str]) -> list[str]:
    """The ``/word`` completions of ``prefix``, sorted: skill ``names``, reserved and exit words.

    ``prefix`` is the typed word, ``/`` included; anything else completes to nothing.
    """
    if not prefix.startswith("/"):
        return []
    exits = (command.removeprefix("/") for command in EXIT_COMMANDS)
    words = {*names, *RESERVED_COMMANDS, *exits}
    typed = prefix[1:]
    return [f"/{word}" for word in sorted(words) if word.startswith(typed)]


class SlashCompleter:
    """A ``readline`` completer of ``/name`` at the start of the line.

    The skill names are read again from ``catalog`` when a line's completion starts (the
    first call, ``state`` 0), so a skill added during the chat completes too.
    """

    def __init__(self, catalog: SkillCatalog, line_before: Callable[[], str] = lambda: "") -> None:
        self._catalog = catalog
        self._line_before = line_before
        self._matches: list[str] = []

    def __call__(self, text: str, state: int) -> str | None:
        """The ``state``-th completion of ``text``, or None when there are no more."""
        if state == 0:
            self._matches = []
            if not self._line_before().strip():
                self._matches = slash_completions(text, self._catalog.refresh().names)
        return self._matches[state] if state < len(self._matches) else None


def install_slash_completion(environ: Mapping[str, str]) -> bool:
    """Complete ``/name`` with Tab in ``chat`` on a terminal; False when it cannot.

    Needs the ``readline`` module and a terminal on stdin; piped input is left alone.
    The names come from the skill folders of the settings in ``environ``.
    """
    if not sys.stdin.isatty():
        return False
    try:
        import readline
    except ImportError:
        return False
    settings = Settings.from_env(environ)
    catalog = SkillCatalog(settings.skills_dirs, disabled=settings.skills_disabled)

    def line_before() -> str:
        return readline.get_line_buffer()[: readline.get_begidx()]

    readline.set_completer_delims(" \t\n")
    readline.set_completer(SlashCompleter(catalog, line_before))
    if "libedit" in (readline.__doc__ or ""):
        readline.parse_and_bind("bind ^I rl_complete")
    else:
        readline.parse_and_bind("tab: complete")
    return True
