"""A later batch reduced first (:mod:`lakeview.graph.later_sql`: the stateless operators by SQL, a linear
aggregate's partial sums per group, any other crossing consolidated) and then stepped gives the view DuckDB's
recompute gives, epoch after epoch of inserts, updates and deletes, for random views of the graph's grammar."""

from __future__ import annotations

import random
from collections import Counter

import duckdb
import pytest

from lakeview.graph import compile_view, step
from lakeview.graph.later_sql import later_batch_sql, later_cost, partials_sql
from tests.lakeview.graph.view_grammar import SCHEMA, TABLES, Inputs, multiset, random_query, recompute_differs


def reduced_then_stepped(query: str, seed: int, epochs: int = 4) -> str | None:
    """Epoch 0 stepped; each later one reduced by DuckDB SQL first, some inputs left to the driver (as change
    feeds are); a description of the first mismatch with the recompute, if any."""
    r = random.Random(seed)
    inputs = Inputs(r)
    graph = compile_view(query, {t: SCHEMA for t in TABLES}, eager=r.random() < 0.5)
    drivers = {t for t in graph.schemas if r.random() < 0.3}
    con, view = duckdb.connect(), Counter()
    for epoch in range(epochs):
        deltas = {t: d for t, d in inputs.epoch().items() if t in graph.schemas}
        if epoch == 0:
            out = step(graph, deltas)
        else:
            for t, delta in deltas.items():
                con.register(f"src_{t}", delta)
            later = later_batch_sql(graph, {t: f"src_{t}" for t in deltas}, "rel_", set(TABLES), drivers, "duckdb")
            for name, sql in later.relations:
                con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {sql}")
            given = {op: con.execute(sql).to_arrow_table() for op, sql in later.given.items()}
            partials = {
                op: con.execute(partials_sql(graph, op, rel, integral(con, rel), "duckdb")).to_arrow_table()
                for op, rel in later.partials.items()
            }
            out = step(graph, {t: d for t, d in deltas.items() if t in drivers}, given, partials)
        view.update(multiset(out, weighted=True))
        view = Counter({k: w for k, w in view.items() if w != 0})
        if differs := recompute_differs(con, inputs, query, view, epoch):
            return differs
    return None


def integral(con: duckdb.DuckDBPyConnection, rel: str) -> set[str]:
    """A relation's integer columns (summed as DECIMAL(38, 0), as the pipeline sums them in Spark)."""
    return {name for name, kind, *_ in con.execute(f"DESCRIBE {rel}").fetchall() if kind in ("BIGINT", "INTEGER")}


@pytest.mark.parametrize(
    "query",
    [
        "SELECT g, COUNT(*) n, SUM(v) s, AVG(x) a, COUNT(v) FILTER (WHERE k > 1) c FROM t1 WHERE v > 0 GROUP BY g",
        "SELECT COUNT(*) n, SUM(v) s FROM t1",
        "SELECT t1.g, t2.k, COUNT(*) n, SUM(t1.v) s FROM t1 JOIN t2 ON t1.k = t2.k GROUP BY t1.g, t2.k",
        "SELECT DISTINCT g, k FROM t1",
        "SELECT id, v * 2 AS w FROM t1 WHERE k > 1 UNION ALL SELECT id, v FROM t2",
        "SELECT g, MIN(v) lo, COUNT(DISTINCT k) d FROM t1 GROUP BY g",
    ],
)
def test_a_reduced_later_batch_steps_to_the_recompute(query: str) -> None:
    for seed in range(3):
        assert reduced_then_stepped(query, seed) is None


def test_random_views_reduced_later_batches_step_to_the_recompute() -> None:
    failures = [f for seed in range(20) if (f := reduced_then_stepped(random_query(seed), seed)) is not None]
    assert not failures, failures[0]


def test_later_cost_says_what_reaches_the_driver() -> None:
    schemas = {t: SCHEMA for t in TABLES}
    appended = compile_view("SELECT id, v FROM t1 WHERE k > 1", schemas)
    assert "appended by the executors" in later_cost(appended, set(), set())
    summed = compile_view("SELECT g, SUM(v) s FROM t1 GROUP BY g", schemas)
    assert "one row per group (partial sums by Spark)" in later_cost(summed, set(), set())
    joined = compile_view("SELECT t1.id, t2.g FROM t1 JOIN t2 ON t1.k = t2.k", schemas)
    cost = later_cost(joined, set(), {"t2"})
    assert "distinct rows with summed weights" in cost and "t2: each change feed's newest change per key" in cost
