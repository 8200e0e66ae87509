"""Import a Python file by its path, as ``langgraph dev`` imports a graph module."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def import_file(path: Path, name: str) -> ModuleType:
    """The module in ``path``, imported afresh under ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
