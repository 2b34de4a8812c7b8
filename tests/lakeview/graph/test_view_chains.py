"""Views over views as operator graphs (no Spark): a change feed (random inserts, updates, deletes per epoch)
-> a view -> a view over it (-> a view over that), each view compiled on its own and stepped with its
upstream's delta as its input, as a downstream reads the upstream's published change. After every epoch each
view's rows equal the recompute of the composed SQL over the current source rows
(:func:`lakeview.stack.chain_oracle.over_rows`, through the chain). Ported from the one-source stack's
ViewMaintainer chain test; the published change files themselves are tests/spark_jobs/test_view_dag_graph.py's."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeview.graph import WEIGHT, compile_view, step
from lakeview.ivm.oracle import compare
from lakeview.sql.graph_plan import graph_sql
from lakeview.stack.chain_oracle import over_rows

ORDERS = pa.schema([(c, pa.int64()) for c in ("order_id", "product_id", "quantity", "price")])
VIEWS = {  # view -> (the relation it reads, its SQL)
    # projection with a computed column -> keyed aggregate -> filter over the aggregate
    "lines": ("orders", "SELECT order_id, product_id, quantity * price AS amount FROM orders"),
    "sales": (
        "lines",
        "SELECT product_id, SUM(amount) AS revenue, COUNT(*) AS n, MAX(amount) AS hi FROM lines GROUP BY product_id",
    ),
    "big": ("sales", "SELECT product_id, revenue, n FROM sales WHERE revenue > 10"),
    # keyed aggregate over the feed -> an aggregate grouping it by one of its values
    "per_product": (
        "orders",
        "SELECT product_id, COUNT(*) AS n, SUM(quantity) AS q FROM orders WHERE quantity > -3 GROUP BY product_id",
    ),
    "by_count": (
        "per_product",
        "SELECT n, COUNT(*) AS products, SUM(q) AS q, MIN(product_id) AS lo FROM per_product GROUP BY n",
    ),
    # filtered projection -> aggregate with HAVING and COUNT(DISTINCT)
    "positive": (
        "orders",
        "SELECT order_id, product_id, quantity * 2 + price AS amount FROM orders WHERE quantity > 0",
    ),
    "repeat_products": (
        "positive",
        "SELECT product_id, SUM(amount) AS s, COUNT(DISTINCT amount) AS d, MIN(amount) AS lo FROM positive "
        "GROUP BY product_id HAVING COUNT(*) >= 2",
    ),
}
CHAINS = {
    "big": ["lines", "sales", "big"],
    "by_count": ["per_product", "by_count"],
    "repeat": ["positive", "repeat_products"],
}

change = st.tuples(
    st.sampled_from(["I", "U", "D", "D"]),
    st.integers(0, 7),  # order_id
    st.one_of(st.none(), st.integers(0, 3)),  # product_id
    st.one_of(st.none(), st.integers(-4, 5)),  # quantity
    st.integers(0, 4),  # price
)
epochs = st.lists(st.lists(change, max_size=8), min_size=1, max_size=4)


def feed_zset(current: dict[int, dict], changes: list[tuple]) -> pa.Table:
    """An epoch of the feed as the base view's input: a change's old image (the key's row) at -1, its new image
    (an insert or update) at +1, applied to ``current`` in order."""
    out = []
    for op, order_id, product_id, quantity, price in changes:
        if order_id in current:
            out.append({**current.pop(order_id), WEIGHT: -1})
        if op != "D":
            current[order_id] = {"order_id": order_id, "product_id": product_id, "quantity": quantity, "price": price}
            out.append({**current[order_id], WEIGHT: 1})
    return pa.Table.from_pylist(out, schema=ORDERS.append(pa.field(WEIGHT, pa.int64())))


def recompute(view: str, source: pa.Table) -> pa.Table:
    """``view``'s rows recomputed from the source rows, through its upstreams."""
    relation, sql = VIEWS[view]
    below = source if relation == "orders" else recompute(relation, source)
    return over_rows(sql, relation, below)


@pytest.mark.parametrize("top", list(CHAINS))
@settings(max_examples=10, deadline=None)
@given(history=epochs)
def test_every_view_of_a_chain_equals_the_recompute_after_every_epoch(top: str, history: list[list[tuple]]) -> None:
    views = CHAINS[top]
    schemas = {"orders": ORDERS}
    graphs = {}
    for view in views:  # each view over its upstream's columns, as its table holds them
        relation, sql = VIEWS[view]
        graphs[view] = compile_view(graph_sql(sql, "spark"), {relation: schemas[relation]})
        schemas[view] = step(graphs[view], {}).drop_columns([WEIGHT]).schema  # an empty epoch, as the pipeline warms up
    held: dict[str, Counter] = {view: Counter() for view in views}
    current: dict[int, dict] = {}
    for number, changes in enumerate(history):
        delta = feed_zset(current, changes)
        for view in views:
            relation = VIEWS[view][0]
            delta = step(graphs[view], {relation: delta.cast(schemas[relation].append(pa.field(WEIGHT, pa.int64())))})
            for row in delta.to_pylist():
                held[view][tuple(v for k, v in row.items() if k != WEIGHT)] += row[WEIGHT]
            held[view] = Counter({k: w for k, w in held[view].items() if w})
            assert all(w > 0 for w in held[view].values()), f"epoch {number}, {view}: a row retracted more than held"
            rows = [dict(zip(graphs[view].names, r)) for r in held[view].elements()]
            expected = recompute(view, pa.Table.from_pylist(list(current.values()), schema=ORDERS))
            result = compare(pa.Table.from_pylist(rows, schema=schemas[view]), expected)
            assert result.equal, f"epoch {number}, view {view} (chain {' -> '.join(views)}): {result.describe()}"
