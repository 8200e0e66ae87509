"""The compiled graph that ``langgraph.json`` serves; the platform injects persistence."""

from __future__ import annotations

import os

from graph.environment import graph_from_env

graph = graph_from_env(os.environ)
