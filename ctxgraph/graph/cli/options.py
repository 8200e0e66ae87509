"""What the subcommand modules share about options: the option error and the search range."""


class OptionError(ValueError):
    """A command-line option or environment variable has a value the command cannot use.

    The command line reports it (and its subclasses, such as ``cli.input.InputError``) as
    one line with exit status 2. It lives below ``cli.main`` so that the subcommand modules
    can raise it without importing the entry point.
    """


SEARCH_LIMITS = (1, 10)
"""The ``memory search --limit`` range: that of the graph's ``memory_search`` tool."""
