"""Allows ``python -m graph.cli``."""

import sys

from graph.cli.main import main

sys.exit(main())
