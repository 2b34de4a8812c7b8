"""Compile-time refusals (the construct and the reason) and explain's operator tree with state and cost."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

from lakeview.errors import UnsupportedSQLError
from lakeview.graph import WEIGHT, compile_view, explain, step

T = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("g", pa.string()), ("v", pa.int64())])
SCHEMAS = {"a": T, "b": T}


@pytest.mark.parametrize(
    ("sql", "construct", "reason"),
    [
        ("SELECT id, random() AS r FROM a", "RANDOM()", "non-deterministic"),
        ("SELECT id, now() AS t FROM a", "NOW()", "non-deterministic"),
        ("SELECT id, current_timestamp AS t FROM a", "CURRENT_TIMESTAMP", "non-deterministic"),
        ("SELECT id, uuid() AS u FROM a", "UUID()", "non-deterministic"),
        (
            "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT n FROM r",
            "WITH RECURSIVE",
            "recursive CTE",
        ),
        ("SELECT id, SUM(v) OVER (PARTITION BY g) AS s FROM a", "SUM(a.v) OVER", "top-k"),
        ("SELECT id, ROW_NUMBER() OVER (ORDER BY v) AS rn FROM a", "ROW_NUMBER() OVER", "rank <= k"),
        ("SELECT id FROM a LIMIT 3", "LIMIT without ORDER BY", "unspecified"),
        ("SELECT id FROM a EXCEPT SELECT id FROM b", "EXCEPT", "not operators"),
        ("SELECT id, (SELECT MAX(v) FROM b) AS m FROM a", "SELECT MAX", "subquery"),
        ("SELECT id FROM a WHERE a.id IN (SELECT id FROM b) OR a.v > 1", "IN (SELECT", "subquery"),
        ("SELECT string_agg(g, ',') AS s FROM a", "LISTAGG", "aggregate not maintained"),
        ("SELECT id FROM nope", "table nope", "not an input"),
        ("SELECT g, v FROM a GROUP BY g", "column a.v", "neither grouped nor aggregated"),
        ("DELETE FROM a", "DELETE", "SELECT query"),
        ("SELECT DISTINCT ON (g) g, v FROM a ORDER BY g, v", "DISTINCT ON", "ROW_NUMBER"),
        ("SELECT g, SUM(v) AS s FROM a GROUP BY ROLLUP (g)", "ROLLUP", "not an operator"),
        ("SELECT id FROM a ORDER BY id LIMIT v", "LIMIT", "integer literal"),
    ],
)
def test_unmaintainable_sql_is_refused_with_construct_and_reason(sql, construct, reason):
    with pytest.raises(UnsupportedSQLError) as raised:
        compile_view(sql, SCHEMAS)
    assert construct in str(raised.value) and reason in str(raised.value)


def test_unparsable_sql_is_refused():
    with pytest.raises(UnsupportedSQLError, match="does not parse"):
        compile_view("SELEC id FROM a", SCHEMAS)


STAR = {
    "orders": pa.schema(
        [("order_id", pa.int64()), ("product_id", pa.int64()), ("customer_id", pa.int64()), ("amount", pa.int64())]
    ),
    "products": pa.schema([("product_id", pa.int64()), ("category", pa.string())]),
    "customers": pa.schema([("customer_id", pa.int64()), ("region_id", pa.int64())]),
    "regions": pa.schema([("region_id", pa.int64()), ("region", pa.string())]),
}
STAR_SQL = """
SELECT r.region, p.category, SUM(o.amount) AS revenue, COUNT(*) AS orders
FROM orders o JOIN products p ON o.product_id = p.product_id
JOIN customers c ON o.customer_id = c.customer_id
JOIN regions r ON c.region_id = r.region_id
GROUP BY r.region, p.category
"""


def test_explain_lists_operators_state_tables_and_cost_and_joins_small_inputs_first():
    graph = compile_view(
        STAR_SQL,
        STAR,
        sizes={"orders": 50_000_000, "products": 10_000, "customers": 100_000, "regions": 10},
        eager=False,
    )
    text = explain(graph)
    assert text.splitlines()[0] == "view: region, category, revenue, orders"
    joins = [line.strip() for line in text.splitlines() if ": Join " in line]
    # printed from the output down, so the first join made is printed last: the chain starts at the smallest
    # input (regions), adds its connected neighbours smallest first, and the 50M-row fact table joins late
    assert len(joins) == 3 and all("INNER" in j for j in joins)
    assert "o_product_id=p_product_id" in joins[0]
    assert "c_customer_id=o_customer_id" in joins[1]
    assert "r_region_id=c_region_id" in joins[2]
    assert "Aggregate GROUP BY" in text and "[linear]" in text
    assert text.count("state ") == 7  # two per join, one for the aggregate
    assert "cost: per changed group (one record)" in text


def test_star_schema_view_maintained_through_dimension_updates():
    graph = compile_view(STAR_SQL, STAR)

    def z(name: str, *rows: tuple) -> pa.Table:
        schema = STAR[name].append(pa.field(WEIGHT, pa.int64()))
        return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)

    step(
        graph,
        {
            "regions": z("regions", (1, "north", 1), (2, "south", 1)),
            "customers": z("customers", (10, 1, 1), (11, 2, 1)),
            "products": z("products", (100, "tea", 1), (101, "cake", 1)),
            "orders": z("orders", (1, 100, 10, 5, 1), (2, 101, 11, 7, 1), (3, 100, 11, 1, 1)),
        },
    )
    # a product changes category: every order of it moves group
    out = step(graph, {"products": z("products", (100, "tea", -1), (100, "coffee", 1))})
    got = sorted((r["region"], r["category"], int(r["revenue"]), r["orders"], r[WEIGHT]) for r in out.to_pylist())
    assert got == [
        ("north", "coffee", 5, 1, 1),
        ("north", "tea", 5, 1, -1),
        ("south", "coffee", 1, 1, 1),
        ("south", "tea", 1, 1, -1),
    ]


def test_eager_aggregation_keeps_one_row_per_join_key_instead_of_one_per_fact_row():
    sql = (
        "SELECT p.category, SUM(o.amount) AS revenue, COUNT(*) AS n, AVG(o.amount) AS mean FROM orders o "
        "JOIN products p ON o.product_id = p.product_id GROUP BY p.category"
    )
    sizes = {"orders": 1_000_000, "products": 100}
    eager, lazy = compile_view(sql, STAR, sizes=sizes), compile_view(sql, STAR, sizes=sizes, eager=False)

    def z(name: str, *rows: tuple) -> pa.Table:
        schema = STAR[name].append(pa.field(WEIGHT, pa.int64()))
        return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)

    orders = z("orders", *[(i, 100 + i % 2, 1, i, 1) for i in range(6)])
    products = z("products", (100, "tea", 1), (101, "cake", 1))
    outs = [step(g, {"orders": orders, "products": products}) for g in (eager, lazy)]
    changed = {"products": z("products", (101, "cake", -1), (101, "tea", 1))}
    outs += [step(g, changed) for g in (eager, lazy)]

    def rows(t: pa.Table) -> list:
        return sorted((r["category"], float(r["revenue"]), r["n"], r["mean"], r[WEIGHT]) for r in t.to_pylist())

    assert rows(outs[0]) == rows(outs[1]) == [("cake", 9.0, 3, 3.0, 1), ("tea", 6.0, 3, 2.0, 1)]
    assert (
        rows(outs[2])
        == rows(outs[3])
        == [("cake", 9.0, 3, 3.0, -1), ("tea", 6.0, 3, 2.0, -1), ("tea", 15.0, 6, 2.5, 1)]
    )

    # the join's order side is one pre-aggregated row per product (2), not one per order (6); eagerly, the
    # join keeps none of them itself: it reads the pre-aggregate's records
    def state_line(graph, key: str) -> str:
        return next(line for line in explain(graph).splitlines() if " state " in line and f"key ({key}" in line)

    assert "6 rows" in state_line(lazy, "o_product_id")
    assert "2 rows" in state_line(eager, "g_product_id") and "groups" in state_line(eager, "g_product_id")
    assert not any(" state " in line and "key (o_product_id" in line for line in explain(eager).splitlines())
    assert "side read from aggregate4's records" in explain(eager)
    assert explain(eager).count("Aggregate GROUP BY") == 2  # one below the join, one above


@pytest.mark.parametrize("form", ["subquery", "qualify"])
def test_a_top_k_of_groups_over_a_join_is_eagerly_aggregated_so_its_join_keeps_one_row_per_product(form: str):
    """The top 2 products per category by revenue: the ranking reads the groups, so the orders are summed per
    product below the join (a product moving category costs its one row, not its orders), and the view's
    change equals the lazily compiled graph's after every epoch."""
    ranked = (
        "SELECT p.category, o.product_id AS pid, SUM(o.amount) AS revenue, ROW_NUMBER() OVER (PARTITION BY "
        "p.category ORDER BY SUM(o.amount) DESC, o.product_id) AS rn FROM orders o JOIN products p "
        "ON o.product_id = p.product_id GROUP BY p.category, o.product_id"
    )
    sql = f"SELECT category, pid, revenue FROM ({ranked}) t WHERE rn <= 2"
    if form == "qualify":
        sql = ranked.replace(", ROW_NUMBER()", ", RANK()") + " QUALIFY rn <= 2"
    eager, lazy = compile_view(sql, STAR, eager=True), compile_view(sql, STAR, eager=False)

    def z(name: str, *rows: tuple) -> pa.Table:
        schema = STAR[name].append(pa.field(WEIGHT, pa.int64()))
        return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)

    epochs = [
        {
            "orders": z("orders", *[(i, 100 + i % 4, 1, 1 + i, 1) for i in range(12)]),
            "products": z("products", (100, "tea", 1), (101, "tea", 1), (102, "tea", 1), (103, "cake", 1)),
        },
        {"products": z("products", (102, "tea", -1), (102, "cake", 1))},
        {"orders": z("orders", (3, 103, 1, 4, -1), (20, 100, 1, 50, 1))},
    ]
    for number, deltas in enumerate(epochs):
        got, expected = step(eager, deltas), step(lazy, deltas)
        assert sorted(map(str, got.to_pylist())) == sorted(map(str, expected.to_pylist())), f"epoch {number}"
        assert got.num_rows > 0

    # the join's order side is one row per product: the pre-aggregate's 4 records, read by the join (the lazy
    # graph's join holds the 12 orders)
    lines = explain(eager).splitlines()
    records = next(line for line in lines if " state " in line and "groups key (g_product_id" in line)
    assert "4 rows" in records and "side read from aggregate" in explain(eager)
    assert "12 rows" in next(line for line in explain(lazy).splitlines() if "state" in line and "(o_product_id" in line)


def test_step_names_an_unknown_input_and_a_delta_missing_columns():
    graph = compile_view("SELECT id FROM a", SCHEMAS)
    with pytest.raises(UnsupportedSQLError, match=r"no input named \['c'\]"):
        step(graph, {"c": pa.table({"id": [1], WEIGHT: [1]})})
    with pytest.raises(UnsupportedSQLError, match="lacks the columns"):
        step(graph, {"a": pa.table({"id": [1], WEIGHT: [1]})})


def test_eager_aggregation_folds_each_dimension_so_a_region_rename_costs_per_group_not_per_order():
    """The star's aggregates are pushed below every join, one fold per dimension (largest first): the last
    join (regions) holds one row per (region, category), so renaming every region re-emits only those rows,
    and the view stays equal to DuckDB's recompute through fact and dimension changes."""
    sizes = {"orders": 1_000_000, "products": 30, "customers": 60, "regions": 4}
    graph = compile_view(STAR_SQL, STAR, sizes=sizes, eager=True)
    r = random.Random(3)
    tables = {
        "regions": {i: f"r{i}" for i in range(4)},
        "customers": {i: r.randrange(4) for i in range(60)},
        "products": {i: f"c{r.randrange(5)}" for i in range(30)},
    }
    orders: list[tuple] = []

    def z(name: str, rows: list[tuple], weight: int) -> pa.Table:
        schema = STAR[name].append(pa.field(WEIGHT, pa.int64()))
        return pa.Table.from_pylist([dict(zip(schema.names, (*t, weight), strict=True)) for t in rows], schema=schema)

    def new_orders(n: int) -> pa.Table:
        rows = [(len(orders) + i, r.randrange(30), r.randrange(60), r.randrange(1, 9)) for i in range(n)]
        orders.extend(rows)
        return z("orders", rows, 1)

    view: dict[tuple, int] = {}

    def keep(delta: pa.Table) -> None:
        for row in delta.to_pylist():
            key = (row["region"], row["category"], int(row["revenue"]), row["orders"])
            view[key] = view.get(key, 0) + row[WEIGHT]

    keep(step(graph, {name: z(name, list(t.items()), 1) for name, t in tables.items()} | {"orders": new_orders(500)}))
    for epoch in range(4):
        deltas = {"orders": new_orders(50)}
        for name, fresh in (("products", lambda: f"c{r.randrange(5)}"), ("customers", lambda: r.randrange(4))):
            keys = r.sample(sorted(tables[name]), 3)
            old = [(k, tables[name][k]) for k in keys]
            tables[name].update({k: fresh() for k in keys})
            deltas[name] = pa.concat_tables([z(name, old, -1), z(name, [(k, tables[name][k]) for k in keys], 1)])
        if epoch == 3:  # every region renamed at once
            old = list(tables["regions"].items())
            tables["regions"] = {k: v + "x" for k, v in old}
            deltas["regions"] = pa.concat_tables(
                [z("regions", old, -1), z("regions", list(tables["regions"].items()), 1)]
            )
        keep(step(graph, deltas))
    con = duckdb.connect()
    con.register("orders", pa.Table.from_pylist([dict(zip(STAR["orders"].names, o, strict=True)) for o in orders]))
    for name, t in tables.items():
        con.register(name, pa.Table.from_pylist([dict(zip(STAR[name].names, kv, strict=True)) for kv in t.items()]))
    expected = {(a, b, int(c), d) for a, b, c, d in con.execute(STAR_SQL).fetchall()}
    assert {k for k, w in view.items() if w} == expected and all(w in (0, 1) for w in view.values())

    text = explain(graph)
    assert text.count("Aggregate GROUP BY") == 4 and text.count(": Join INNER") == 3
    # the regions join is the last (outermost): its fact side holds at most one row per (region, category)
    region_join = next(line for line in text.splitlines() if ": Join INNER key (r_region_id" in line)
    depth = len(region_join) - len(region_join.lstrip())
    sides = [line for line in text.splitlines() if "state join" in line and len(line) - len(line.lstrip()) == depth + 4]
    held = [int(line.split(", ")[1].split(" rows")[0]) for line in sides if "rows of" in line]
    assert max(held) <= 4 * 5
    assert "last epoch:" in text and "rows out" in text


PRICED = {
    "orders": pa.schema([("id", pa.int64()), ("pid", pa.int64()), ("cid", pa.int64()), ("qty", pa.int64())]),
    "products": pa.schema([("id", pa.int64()), ("category", pa.string()), ("price", pa.int64())]),
    "customers": pa.schema([("id", pa.int64()), ("rid", pa.int64())]),
    "regions": pa.schema([("id", pa.int64()), ("region", pa.string())]),
}
PRICED_SQL = (
    "SELECT r.region, p.category, COUNT(*) n, SUM(o.qty * p.price) revenue, SUM(o.qty * p.price * 2) twice "
    "FROM orders o JOIN products p ON o.pid = p.id JOIN customers c ON o.cid = c.id JOIN regions r ON c.rid = r.id "
    "GROUP BY r.region, p.category"
)


def test_a_sum_of_fact_times_dimension_is_pushed_below_the_joins_and_stays_equal_to_the_recompute():
    """SUM(o.qty * p.price) = SUM(SUM(o.qty) * p.price) over the (product, customer) groups: with no size
    hints (as a pipeline compiles it) the FROM input is the fact, the products join folds first, and a price
    change re-prices only that product's groups; after every epoch of orders and dimension updates the view
    equals DuckDB's recompute."""
    graph = compile_view(PRICED_SQL, PRICED, eager=True)
    text = explain(graph)
    assert text.count("Aggregate GROUP BY") == 4 and text.count(": Join INNER") == 3
    r = random.Random(5)
    tables: dict[str, dict[int, tuple]] = {
        "regions": {i: (f"r{i}",) for i in range(3)},
        "customers": {i: (r.randrange(3),) for i in range(20)},
        "products": {i: (f"c{r.randrange(4)}", r.randrange(1, 9)) for i in range(15)},
    }
    orders: list[tuple] = []

    def z(name: str, rows: list[tuple], weight: int) -> pa.Table:
        schema = PRICED[name].append(pa.field(WEIGHT, pa.int64()))
        return pa.Table.from_pylist([dict(zip(schema.names, (*t, weight), strict=True)) for t in rows], schema=schema)

    def new_orders(n: int) -> pa.Table:
        rows = [(len(orders) + i, r.randrange(15), r.randrange(20), r.randrange(1, 5)) for i in range(n)]
        orders.extend(rows)
        return z("orders", rows, 1)

    def rows(name: str) -> list[tuple]:
        return [(k, *v) for k, v in tables[name].items()]

    view: dict[tuple, int] = {}
    deltas = {name: z(name, rows(name), 1) for name in tables} | {"orders": new_orders(200)}
    fresh = {
        "products": lambda: (f"c{r.randrange(4)}", r.randrange(1, 9)),
        "customers": lambda: (r.randrange(3),),
        "regions": lambda: (f"r{r.randrange(9)}",),
    }
    for epoch in range(5):
        for row in step(graph, deltas).to_pylist():
            key = (row["region"], row["category"], row["n"], row["revenue"], row["twice"])
            view[key] = view.get(key, 0) + row[WEIGHT]
        con = duckdb.connect()
        con.register(
            "orders", pa.Table.from_pylist([dict(zip(PRICED["orders"].names, o, strict=True)) for o in orders])
        )
        for name in tables:
            con.register(
                name, pa.Table.from_pylist([dict(zip(PRICED[name].names, t, strict=True)) for t in rows(name)])
            )
        expected = set(con.execute(PRICED_SQL).fetchall())
        assert {k for k, w in view.items() if w} == expected, f"epoch {epoch}"
        deltas = {"orders": new_orders(30)}
        for name in tables:
            keys = r.sample(sorted(tables[name]), 2)
            old = [(k, *tables[name][k]) for k in keys]
            tables[name].update({k: fresh[name]() for k in keys})
            deltas[name] = pa.concat_tables([z(name, old, -1), z(name, [(k, *tables[name][k]) for k in keys], 1)])
