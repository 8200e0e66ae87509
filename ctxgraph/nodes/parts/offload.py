"""The offloading part: the artifact readers and the wrapper that offloads large results."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.tools import BaseTool

from ctxgraph.nodes.offload.read_tools import grep_artifact_tool, read_artifact_tool
from ctxgraph.nodes.offload.results import ResultOffloader
from ctxgraph.nodes.part import Part, PartSetup
from ctxgraph.nodes.tools.wrappers import ToolWrapper


class OffloadPart(Part):
    """Offloading as a part: ``read_artifact`` and ``grep_artifact``, and the result offloader.

    The readers are bound together once the thread has an artifact, and stay bound
    (``read_tools.ARTIFACT_GATE``). The offloader is the innermost wrapper, next to the tool.
    """

    def tools(self, setup: PartSetup) -> Sequence[BaseTool]:
        """The two artifact readers."""
        return [read_artifact_tool(), grep_artifact_tool()]

    def wrappers(self, setup: PartSetup) -> Sequence[ToolWrapper]:
        """The result offloader, counting with the graph's counter."""
        return [ResultOffloader(setup.main, setup.settings, counter=setup.counter)]
