"""Benchmarks for ctxgraph; run ``python -m bench.compaction_bench``."""
