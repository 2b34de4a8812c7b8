"""A view's SQL as one graph of incremental operators over Z-sets (DBSP), maintained epoch by epoch.

Pure: sqlglot, pyarrow and DuckDB only (no Spark, table format or catalog). ``compile_view`` builds the
graph, ``step`` runs one epoch, ``explain`` prints it.
"""

from lakeview.graph.compile import compile_view
from lakeview.graph.driver import Graph, explain, step
from lakeview.graph.state import MemoryStateStore, StateStore, StateTable
from lakeview.graph.zset import WEIGHT

__all__ = ["WEIGHT", "Graph", "MemoryStateStore", "StateStore", "StateTable", "compile_view", "explain", "step"]
