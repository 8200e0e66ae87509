"""Compaction: partition, summary, ledger, verification and commit of a thread's window."""

from ctxgraph.nodes.compaction.partition import exchange_units, partition_history, repair_tool_pairs

__all__ = ["exchange_units", "partition_history", "repair_tool_pairs"]
