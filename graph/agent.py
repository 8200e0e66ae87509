"""The compiled graph that ``langgraph.json`` serves; the platform injects persistence."""

from __future__ import annotations

import os

from ctxgraph.graph.environment import EnvironmentConfig

graph = EnvironmentConfig.read(os.environ).build()
