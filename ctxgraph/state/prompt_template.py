"""Prompt templates with named placeholders, checked once when a graph is built."""

from __future__ import annotations

from collections.abc import Collection
from string import Formatter


class PromptTemplateError(ValueError):
    """A prompt template a caller passed cannot be filled; the message names the fix."""


def placeholders(template: str) -> set[str]:
    """The placeholder names of ``template`` (``{name}`` fields).

    Raises:
        PromptTemplateError: the braces do not parse (write ``{{`` and ``}}`` for
            literal braces), or a field is positional (``{}``), indexed or has an
            attribute (``{a.b}``, ``{a[0]}``).

    """
    try:
        fields = [name for _, name, _, _ in Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise PromptTemplateError(f"{error}; write {{{{ and }}}} for literal braces") from error
    bad = [name for name in fields if not name.isidentifier()]
    if bad:
        raise PromptTemplateError(
            f"placeholders must be plain names such as {{conversation}}, not {bad}"
        )
    return set(fields)


def check_template(
    template: object,
    *,
    parameter: str,
    allowed: Collection[str],
    required: Collection[str] = (),
) -> str:
    """Return ``template`` once it is a string whose placeholders ``format`` can fill.

    Args:
        template: The caller's template.
        parameter: The argument it was passed as, named in errors.
        allowed: Placeholders the caller may use (filled on every call).
        required: Placeholders the template must contain.

    Returns:
        The template, unchanged.

    Raises:
        PromptTemplateError: ``template`` is not a string, does not parse, uses a
            placeholder outside ``allowed`` or lacks one of ``required``.

    """
    if not isinstance(template, str):
        raise PromptTemplateError(
            f"{parameter} must be a str template, not {type(template).__name__}"
        )
    try:
        names = placeholders(template)
    except PromptTemplateError as error:
        raise PromptTemplateError(f"{parameter}: {error}") from error
    known = ", ".join(f"{{{name}}}" for name in sorted(allowed))
    unknown = sorted(names - set(allowed))
    if unknown:
        raise PromptTemplateError(
            f"{parameter} uses unknown placeholder(s) {unknown}; the ones filled are {known}"
        )
    missing = sorted(set(required) - names)
    if missing:
        raise PromptTemplateError(
            f"{parameter} lacks the placeholder(s) {missing}: without them the model "
            f"never sees that input (the ones filled are {known})"
        )
    return template
