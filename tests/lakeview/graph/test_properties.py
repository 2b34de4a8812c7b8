"""Property: for random view queries from the grammar (joins of 1-4 inputs of every kind, subqueries in FROM,
CTEs, [NOT] IN / [NOT] EXISTS, aggregates over NULLs, DISTINCT, UNION, top-k with ties, ORDER BY … LIMIT) and
random insert / update / delete sequences on every input, the maintained view equals DuckDB's recompute of
the same SQL over the same inputs after every epoch. A fixed-seed slice; bench/graph_fuzz.py runs any number.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.lakeview.graph.view_grammar import run_seed


@seed(20261125)
@settings(max_examples=24, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_maintained_view_equals_duckdb_recompute_after_every_epoch(query_seed):
    failure = run_seed(query_seed, epochs=5)
    assert failure is None, f"seed {failure.seed}, epoch {failure.epoch}\n{failure.query}\n{failure.diff}"
