"""A view's SQL as one graph of incremental operators over Z-sets (DBSP), maintained epoch by epoch.

Pure: sqlglot, pyarrow and DuckDB only (no Spark, table format or catalog). ``compile_view`` builds the
graph, ``step`` runs one epoch (input deltas in, the view's delta out), ``explain`` prints it.

Maintained: filters and projections of any deterministic scalar expression; INNER, LEFT, RIGHT, FULL OUTER
and CROSS joins of any number of inputs (equi-keys plus any residual ON predicate; self-joins); CTEs and
subqueries in FROM (nested); ``[NOT] IN (subquery)`` and ``[NOT] EXISTS`` with equality correlation as
top-level AND-ed WHERE terms; GROUP BY with SUM, COUNT, COUNT(*), AVG, MIN, MAX, COUNT(DISTINCT …), FILTER
(WHERE …) and HAVING; SELECT DISTINCT; UNION and UNION ALL; top-k (ROW_NUMBER / RANK / DENSE_RANK OVER
(PARTITION BY … ORDER BY …) bounded by QUALIFY or by a WHERE on the subquery's rank column); ORDER BY … LIMIT
k [OFFSET m] over a whole query.

Refused at compile time (UnsupportedSQLError naming the construct and why): non-deterministic functions
(random, now, current_timestamp, uuid, …), WITH RECURSIVE, other window functions or unbounded ranks, LIMIT
without ORDER BY, EXCEPT / INTERSECT, scalar subqueries and subqueries under OR, DISTINCT ON, ROLLUP / CUBE /
GROUPING SETS, LATERAL / UNNEST, order-dependent aggregates (string_agg, list, …), unknown tables.

Inputs must be valid Z-sets of their table: a delete (-1) retracts a row that is there.
"""

from lakeview.graph.compile import compile_view
from lakeview.graph.driver import Graph, explain, step
from lakeview.graph.state import MemoryStateStore, StateStore, StateTable
from lakeview.graph.zset import WEIGHT

__all__ = ["WEIGHT", "Graph", "MemoryStateStore", "StateStore", "StateTable", "compile_view", "explain", "step"]
