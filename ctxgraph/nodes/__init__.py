"""The graph's nodes and routers, one concern per module."""
