"""Checks on the text a person gives ``chat`` and ``run``, made before anything is written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import BinaryIO

from ctxgraph.graph.cli.options import OptionError
from ctxgraph.graph.environment import EnvironmentConfig
from ctxgraph.nodes.offload.inputs import refusal_limit
from ctxgraph.state.messages import unstorable_position, unstorable_problem
from ctxgraph.state.models import input_window
from ctxgraph.state.tokens import count_text

STDIN_ARGUMENT = "-"
"""The ``run`` argument that stands for one message read from standard input."""


class InputError(OptionError):
    """A message cannot be sent: it cannot be stored, or it is larger than the model's input.

    A subclass of ``OptionError``, so the command line reports it as one line with exit
    status 2.
    """


def read_stdin_message(stream: BinaryIO) -> str:
    """The whole of ``stream`` as one message, UTF-8 with undecodable bytes kept as surrogates.

    Undecodable bytes become lone surrogates, which ``check_message`` then names by position.
    """
    return stream.read().decode("utf-8", errors="surrogateescape")


def expand_stdin(texts: Sequence[str], stdin: BinaryIO) -> list[str]:
    """``texts`` with the argument ``-`` replaced by the message read from standard input."""
    if texts.count(STDIN_ARGUMENT) > 1:
        raise InputError("'-' (read the message from standard input) may be given only once")
    if STDIN_ARGUMENT not in texts:
        return list(texts)
    message = read_stdin_message(stdin)
    return [message if text == STDIN_ARGUMENT else text for text in texts]


def message_limit(config: EnvironmentConfig) -> tuple[int, str] | None:
    """The most tokens one message may have, and where that limit comes from; None: no limit.

    ``chat`` and ``run`` always run with their database's Store and a thread id, so a large
    message can be offloaded to an artifact. With the main model's input window unknown
    there is then no limit (the graph offloads what is over its threshold); a known window
    (as the provider reports it, else ``context_window``, ``CTXGRAPH_CONTEXT_WINDOW``) is
    the limit itself. With input offloading off, an unknown window falls back to
    ``trigger_tokens`` (see ``nodes.offload.inputs.refusal_limit``).
    """
    window = input_window(config.models.main, config.settings.context_window)
    return refusal_limit(config.settings, window, can_offload=True)


UTF8_HOW_TO = (
    "send UTF-8 text: convert it first (e.g. `iconv -f latin1 -t utf-8 notes.txt`), or use "
    "a UTF-8 terminal (e.g. LANG=C.UTF-8)"
)
"""How to fix a message that is not UTF-8, the end of its error."""


def check_message(text: str, limit: tuple[int, str] | None, *, label: str = "the message") -> None:
    """Raise ``InputError`` when ``text`` is empty, cannot be stored or is over the limit.

    Empty means nothing but whitespace; a ``limit`` of None checks no size. A NUL (U+0000)
    is refused with the graph's own words (``unstorable_problem``); a lone surrogate, as
    from undecodable bytes, with how to send UTF-8.
    """
    if not text.strip():
        raise InputError(
            f"{label} is empty: a message needs some text (an argument, or - to read it "
            "from standard input); nothing was written"
        )
    position = unstorable_position(text)
    if position is not None and text[position] == "\0":
        raise InputError(unstorable_problem(label, text, position))
    if position is not None:
        code = ord(text[position])
        raise InputError(
            f"{label} cannot be encoded as UTF-8: character {position + 1} is a lone "
            f"surrogate (U+{code:04X}), as from undecodable bytes; nothing was written; "
            + UTF8_HOW_TO
        )
    if limit is None:
        return
    tokens, source = limit
    if len(text.encode("utf-8")) > tokens:  # every token is at least one byte
        size = count_text(text)
        if size > tokens:
            raise InputError(
                f"{label} is {size} tokens ({len(text)} characters), over {source} of "
                f"{tokens} tokens; nothing was written"
            )
