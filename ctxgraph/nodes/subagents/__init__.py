"""Subagents: the ``task`` tool, the node that runs isolated children, and their record."""
