"""Allows ``python -m ctxgraph.graph.cli``."""

import sys

from ctxgraph.graph.cli.main import main

sys.exit(main())
