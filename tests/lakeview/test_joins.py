"""Joins and UNION ALL: which forms are planned (and how others are refused), and views kept
epoch by epoch with the same code the Spark pipeline runs (DuckDB standing in for Spark's
per-batch part) equal the full recompute after every epoch, under random inserts, updates and
deletes on both sides."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeview.config.models import ChangeFeedConfig
from lakeview.errors import UnsupportedSQLError
from lakeview.ivm.combine import CombinedMaintainer
from lakeview.ivm.commits import Epoch
from lakeview.ivm.oracle import compare
from lakeview.sql.joins import JoinPlan
from lakeview.sql.plan import KeyedAggregatePlan
from lakeview.sql.planner import plan_view
from lakeview.sql.union import UnionPlan
from tests.lakeview.duck_batch import duck, latest_changes, spark_sql
from tests.lakeview.memory_writer import MemoryWriter

# --- planning -------------------------------------------------------------------------------

SALES_BY_CATEGORY = """SELECT p.category AS category, SUM(o.amount) AS total, COUNT(*) AS n
FROM orders AS o
JOIN products AS p ON o.product_id = p.product_id
WHERE o.amount > 0
GROUP BY p.category"""


def test_join_with_an_aggregate_on_top_is_planned_with_its_key_and_needed_columns() -> None:
    plan = plan_view("v", SALES_BY_CATEGORY)
    assert isinstance(plan, JoinPlan) and plan.how == "inner" and plan.sources == ("orders", "products")
    orders, products = plan.sides
    assert (orders.key, products.key) == (("product_id",), ("product_id",))
    assert set(orders.columns) == {"product_id", "amount"} and set(products.columns) == {"product_id", "category"}
    assert isinstance(plan.top, KeyedAggregatePlan) and plan.key == ("category",)


def test_left_join_projection_and_composite_keys_are_planned() -> None:
    plan = plan_view(
        "v",
        "SELECT o.order_id, p.name FROM orders o LEFT JOIN products p ON o.product_id = p.product_id AND o.shop = p.shop",
    )
    assert isinstance(plan, JoinPlan) and plan.how == "left"
    assert plan.sides[0].key == ("product_id", "shop") and plan.top.kind == "append"
    assert plan.top.columns == ("order_id", "name")


def test_union_all_alone_and_under_an_aggregate_are_planned() -> None:
    plain = plan_view(
        "v", "SELECT id, x FROM a WHERE x > 1 UNION ALL SELECT id, y FROM b UNION ALL SELECT id, 0 AS x FROM a"
    )
    assert (
        isinstance(plain, UnionPlan) and plain.sources == ("a", "b") and len(plain.branches) == 3 and plain.top is None
    )
    agg = plan_view(
        "v", "SELECT k, SUM(x) AS s FROM (SELECT k, x FROM a UNION ALL SELECT k, y AS x FROM b) AS u GROUP BY k"
    )
    assert isinstance(agg, UnionPlan) and agg.key == ("k",)


@pytest.mark.parametrize(
    ("sql", "construct", "line", "nearest"),
    [
        ("SELECT a.x\nFROM a\nFULL OUTER JOIN b ON a.k = b.k", "FULL OUTER JOIN", 3, "JOIN b ON a.k = b.k"),
        ("SELECT a.x\nFROM a\nCROSS JOIN b", "CROSS JOIN", 3, "JOIN b ON a.k = b.k"),
        ("SELECT a.x\nFROM a\nRIGHT JOIN b ON a.k = b.k", "RIGHT JOIN", 3, "LEFT JOIN with the two sources swapped"),
        (
            "SELECT a.x\nFROM a JOIN b\nON a.k < b.k",
            "'a.k < b.k' is not an equality",
            3,
            "other conditions go in WHERE",
        ),
        ("SELECT a.x\nFROM a JOIN b ON a.k = b.k OR a.j = b.j", "is not an equality", 2, "a.k = b.k"),
        (
            "SELECT a.x\nFROM a\nJOIN b ON a.k = b.k\nJOIN c ON c.k = a.k",
            "more than two sources",
            4,
            "one JOIN per view",
        ),
        ("SELECT x\nFROM a JOIN b ON a.k = b.k", "column 'x' must be qualified", 1, "a.x or b.x"),
        ("SELECT a.x FROM a\nJOIN b USING (k)", "USING", 2, "ON a.k = b.k"),
        ("SELECT a.k, b.k\nFROM a JOIN b ON b.k = a.k", "two output columns are named 'k'", 1, "b.k AS b_k"),
        ("SELECT x FROM a\nUNION\nSELECT x FROM b", "UNION (without ALL)", 2, "UNION ALL"),
        ("SELECT x FROM a\nINTERSECT\nSELECT x FROM b", "INTERSECT", 2, "UNION ALL"),
        (
            "SELECT x FROM a\nUNION ALL\nSELECT k, SUM(y) AS x FROM b GROUP BY k",
            "UNION ALL branch with keyed aggregate",
            3,
            "GROUP BY k",
        ),
    ],
)
def test_unsupported_joins_and_unions_name_construct_line_and_nearest_form(
    sql: str, construct: str, line: int, nearest: str
) -> None:
    with pytest.raises(UnsupportedSQLError) as info:
        plan_view("v", sql)
    message = str(info.value)
    assert (
        construct in message
        and f"(line {line})" in message
        and "nearest supported form" in message
        and nearest in message
    ), message


# --- maintenance equals recompute -------------------------------------------------------------

FEEDS = {
    "orders": ChangeFeedConfig(
        operation="op", key=["order_id"], sequence="seq", insert=["I"], update=["U"], delete=["D"]
    ),
    "products": ChangeFeedConfig(
        operation="op", key=["product_id"], sequence="seq", insert=["I"], update=["U"], delete=["D"]
    ),
}
SCHEMAS = {
    "orders": pa.schema(
        [
            ("order_id", pa.int64()),
            ("product_id", pa.int64()),
            ("amount", pa.int64()),
            ("op", pa.string()),
            ("seq", pa.int64()),
        ]
    ),
    "products": pa.schema(
        [("product_id", pa.int64()), ("category", pa.string()), ("op", pa.string()), ("seq", pa.int64())]
    ),
}
VIEWS = {
    "inner_agg": "SELECT p.category AS category, SUM(o.amount) AS total, COUNT(*) AS n, MAX(o.amount) AS hi "
    "FROM orders o JOIN products p ON o.product_id = p.product_id GROUP BY p.category",
    "left_agg": "SELECT p.category AS category, SUM(o.amount) AS total, COUNT(*) AS n, COUNT(p.product_id) AS matched "
    "FROM orders o LEFT JOIN products p ON o.product_id = p.product_id WHERE o.amount > -4 GROUP BY p.category",
    "inner_projection": "SELECT o.order_id, p.category, o.amount * 2 AS a2 FROM orders o JOIN products p ON o.product_id = p.product_id "
    "WHERE o.amount > -3",
    "left_projection": "SELECT o.product_id, p.category, o.amount FROM orders o LEFT JOIN products p ON o.product_id = p.product_id",
    "union": "SELECT product_id AS id, amount AS x FROM orders WHERE amount > 0 UNION ALL SELECT product_id AS id, 1 AS x FROM products",
    "union_agg": "SELECT k, SUM(x) AS s, COUNT(*) AS n FROM (SELECT product_id AS k, amount AS x FROM orders UNION ALL "
    "SELECT product_id AS k, 10 AS x FROM products WHERE category IS NOT NULL) AS u GROUP BY k",
}
MODES = {  # (change feeds with an operation column, before/after-image feeds); the others are append-only streams
    "both_feeds": ({"orders", "products"}, set()),
    "stream_with_changing_table": ({"products"}, set()),
    "two_streams": (set(), set()),
    "table_as_image_feed": (set(), {"products"}),
}

order_change = st.tuples(
    st.sampled_from(["I", "U", "D"]),
    st.integers(0, 6),
    st.one_of(st.none(), st.integers(0, 3)),
    st.one_of(st.none(), st.integers(-5, 5)),
)
product_change = st.tuples(
    st.sampled_from(["I", "U", "D"]), st.integers(0, 4), st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))
)
epochs = st.lists(
    st.tuples(st.lists(order_change, max_size=6), st.lists(product_change, max_size=4)), min_size=1, max_size=3
)


def maintainer(sql: str, feeds: set[str], images: frozenset[str] = frozenset()) -> CombinedMaintainer:
    plan = plan_view("v", sql)
    top = plan.top
    state = [MemoryWriter() for _ in range(1 + len(top.multisets))] if isinstance(top, KeyedAggregatePlan) else []
    sides = [MemoryWriter(), MemoryWriter()] if isinstance(plan, JoinPlan) else []
    return CombinedMaintainer(
        plan=plan,
        view=MemoryWriter(),
        state=state,
        sides=sides,
        feeds={s: FEEDS[s] for s in feeds if s in plan.sources},
        mirrors={s: MemoryWriter() for s in feeds if s in plan.sources},
        source_columns={s: SCHEMAS[s].names for s in plan.sources},
        deleting=set(images),
    )


def run_epoch(
    m: CombinedMaintainer, number: int, batches: dict[str, pa.Table], zsets: dict[str, pa.Table] | None = None
) -> None:
    """What the pipeline does per micro-batch, with DuckDB in place of Spark (``zsets``: image
    feeds, whose before/after images Spark turns into weights directly)."""
    inputs = {}
    for source in m.plan.sources:
        batch = batches[source]
        if zsets and source in zsets:
            inputs[source] = zsets[source]
        elif source in m.feeds:
            inputs[source] = latest_changes(m.feeds[source], batch).drop(["__lv_rn"])
        else:
            inputs[source] = duck("SELECT *, CAST(1 AS INTEGER) AS __lv_w FROM b", b=batch)
    m.apply(Epoch(view="v", number=number, frontier={}), inputs)


class Sources:
    """The sources' current contents, kept the obvious way (the recompute's input)."""

    def __init__(self, feeds: set[str]) -> None:
        self.feeds = feeds
        self.keyed: dict[str, dict[int, dict]] = {"orders": {}, "products": {}}
        self.appended: dict[str, list[dict]] = {"orders": [], "products": []}
        self.seq = 0
        self.zsets: dict[str, pa.Table] = {}  # each batch as weights: the old row -1, the new row +1

    def batch(self, source: str, changes: list[tuple]) -> pa.Table:
        rows, weighted = [], []
        for change in changes:
            self.seq += 1
            if source == "orders":
                op, id_, product, amount = change
                row = {"order_id": id_, "product_id": product, "amount": amount}
            else:
                op, id_, category = change
                row = {"product_id": id_, "category": category}
            if source not in self.feeds:
                op = "I"  # an append-only stream: every row is new
            row |= {"op": op, "seq": self.seq}
            key = "order_id" if source == "orders" else "product_id"
            if source not in self.feeds:
                self.appended[source].append(row)
                weighted.append(row | {"__lv_w": 1})
                rows.append(row)
                continue
            if (old := self.keyed[source].get(row[key])) is not None:
                weighted.append(old | {"__lv_w": -1})
            if op == "D":
                self.keyed[source].pop(row[key], None)
            else:
                self.keyed[source][row[key]] = row
                weighted.append(row | {"__lv_w": 1})
            rows.append(row)
        self.zsets[source] = pa.Table.from_pylist(
            weighted, schema=SCHEMAS[source].append(pa.field("__lv_w", pa.int32()))
        )
        return pa.Table.from_pylist(rows, schema=SCHEMAS[source])

    def table(self, source: str) -> pa.Table:
        rows = self.appended[source] if source not in self.feeds else list(self.keyed[source].values())
        return pa.Table.from_pylist(rows, schema=SCHEMAS[source])


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", list(VIEWS))
@settings(max_examples=2, deadline=None)
@given(history=epochs)
def test_join_and_union_views_equal_recompute_after_every_epoch(
    name: str, mode: str, history: list[tuple[list, list]]
) -> None:
    sql = VIEWS[name]
    feeds, images = MODES[mode]
    sources = Sources(feeds | images)
    m = maintainer(sql, feeds, frozenset(images))
    for number, (orders, products) in enumerate(history):
        batches = {"orders": sources.batch("orders", orders), "products": sources.batch("products", products)}
        run_epoch(m, number, batches, {s: sources.zsets[s] for s in images})
        expected = duck(spark_sql(sql), orders=sources.table("orders"), products=sources.table("products"))
        view = m.view.rows if m.view.rows is not None and m.view.rows.num_columns else expected.schema.empty_table()
        result = compare(view, expected)
        assert result.equal, f"epoch {number}: {result.describe()}"


def test_updating_a_product_retracts_and_reemits_its_joined_rows() -> None:
    m = maintainer(VIEWS["left_projection"], {"products"})
    sources = Sources({"products"})
    run_epoch(
        m,
        0,
        {
            "orders": sources.batch("orders", [("I", 1, 1, 5), ("I", 2, 1, 7), ("I", 3, 2, 1)]),
            "products": sources.batch("products", [("I", 1, "a")]),
        },
    )
    assert sorted(m.view.rows.to_pylist(), key=str) == sorted(
        [
            {"product_id": 1, "category": "a", "amount": 5},
            {"product_id": 1, "category": "a", "amount": 7},
            {"product_id": 2, "category": None, "amount": 1},
        ],
        key=str,
    )
    run_epoch(
        m,
        1,
        {"orders": sources.batch("orders", []), "products": sources.batch("products", [("U", 1, "b"), ("I", 2, "c")])},
    )
    assert sorted((r["product_id"], r["category"]) for r in m.view.rows.to_pylist()) == [(1, "b"), (1, "b"), (2, "c")]
    run_epoch(m, 2, {"orders": sources.batch("orders", []), "products": sources.batch("products", [("D", 1, None)])})
    assert sorted((r["product_id"], r["category"]) for r in m.view.rows.to_pylist()) == [(1, None), (1, None), (2, "c")]


def test_replayed_epoch_after_a_crash_between_commits_changes_nothing() -> None:
    """Replaying an epoch after only some of its tables committed ends equal to one clean run."""
    sql = VIEWS["left_agg"]
    history = [
        ([("I", 1, 1, 5), ("I", 2, 2, 3)], [("I", 1, "a")]),
        ([("U", 2, 1, 4), ("D", 1, None, None)], [("U", 1, "b"), ("I", 2, "a")]),
    ]
    clean = maintainer(sql, {"orders", "products"})
    reference = Sources({"orders", "products"})
    for number, (o, p) in enumerate(history):
        run_epoch(clean, number, {"orders": reference.batch("orders", o), "products": reference.batch("products", p)})
    count = len(maintainer(sql, {"orders", "products"}).tables())
    for crash_after in range(count - 1):
        m = maintainer(sql, {"orders", "products"})
        sources = Sources({"orders", "products"})
        for number, (o, p) in enumerate(history):
            batches = {"orders": sources.batch("orders", o), "products": sources.batch("products", p)}
            if number == 1:
                # commit order: view state tables, the view, the sides, the mirrors
                order = [*m.state, m.view, *m.sides, *m.mirrors.values()]
                saved = [(t.rows, t.epoch, t.commits) for t in order]
                run_epoch(m, number, batches)
                for t, (rows, epoch, commits) in list(zip(order, saved))[crash_after + 1 :]:
                    t.rows, t.epoch, t.commits = rows, epoch, commits  # these commits never happened
            run_epoch(m, number, batches)
        result = compare(m.view.rows, clean.view.rows)
        assert result.equal, f"crash after table {crash_after}: {result.describe()}"


def test_explain_shows_the_join_operator_its_state_and_key(tmp_path) -> None:
    from lakeview.ivm.explain import explain
    from lakeview.project import parse_project

    data = {
        "sources": {
            "orders": {"format": "json", "path": "o", "schema": "order_id BIGINT, product_id BIGINT, amount DOUBLE"},
            "products": {
                "format": "json",
                "path": "p",
                "schema": "product_id BIGINT, category STRING, op STRING, seq BIGINT",
                "changes": {"operation": "op", "key": ["product_id"], "sequence": "seq"},
            },
        },
        "views": {
            "by_category": {"sql": SALES_BY_CATEGORY, "namespace": "shop"},
            "enriched": {
                "sql": "SELECT o.order_id, p.category FROM orders o LEFT JOIN products p ON o.product_id = p.product_id"
            },
            "both": {"sql": "SELECT order_id AS id FROM orders UNION ALL SELECT product_id FROM products"},
        },
    }
    project = parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)
    text = explain(project, "by_category")
    assert "join orders ⋈ products (inner) ON o.product_id = p.product_id" in text
    assert (
        "shop.__lv_state_by_category_join_o (key product_id" in text
        and "shop.__lv_state_by_category_src_products" in text
    )
    assert (
        "aggregate GROUP BY p.category" in text and "SUM(o.amount)" in text and text.splitlines()[-2] == "key: category"
    )
    left = explain(project, "enriched")
    assert "LEFT: a left row is NULL-extended" in left and "key: order_id, category" in left
    assert "UNION ALL of 2 projections" in explain(project, "both")
    backfill = (
        "a first batch of more than 500000 input rows ([spark] driver_rows_max), its tables still empty (a backfill)"
    )
    assert all(backfill in explain(project, view) for view in ("by_category", "enriched", "both")), (
        "spark_jobs.combined_bootstrap"
    )


def test_config_names_a_join_column_missing_from_its_source(tmp_path) -> None:
    from lakeview.errors import ConfigError
    from lakeview.project import parse_project

    data = {
        "sources": {
            "orders": {"format": "json", "path": "o", "schema": "order_id BIGINT, product_id BIGINT"},
            "products": {"format": "json", "path": "p", "schema": "product_id BIGINT, category STRING"},
        },
        "views": {
            "v": {
                "sql": "SELECT p.categry, COUNT(*) AS n FROM orders o JOIN products p ON o.product_id = p.product_id GROUP BY p.categry"
            }
        },
    }
    with pytest.raises(ConfigError) as info:
        parse_project(data, file="lakeview.toml", root=tmp_path)
    assert str(info.value) == "lakeview.toml: views.v.sql: p.categry: not in the schema of source 'products'"


def test_config_accepts_an_aggregate_over_a_join_view(tmp_path) -> None:
    from lakeview.errors import ConfigError
    from lakeview.project import parse_project

    data = {
        "sources": {
            "orders": {"format": "json", "path": "o", "schema": "order_id BIGINT, product_id BIGINT"},
            "products": {"format": "json", "path": "p", "schema": "product_id BIGINT, category STRING"},
        },
        "views": {
            "enriched": {
                "sql": "SELECT o.order_id, p.category FROM orders o JOIN products p ON o.product_id = p.product_id"
            },
            "per_category": {"sql": "SELECT category, COUNT(*) AS n FROM enriched GROUP BY category"},
        },
    }
    project = parse_project(data, file="lakeview.toml", root=tmp_path)
    from lakeview.sql.dag import downstreams_of, view_key

    assert downstreams_of(project, "enriched") == ["per_category"]
    assert view_key(project, "enriched") is None, "an inner join of append-only sources is append-only"
    data["sources"]["orders"]["changes"] = {"operation": "op", "key": ["order_id"], "sequence": "seq"}
    data["sources"]["orders"]["schema"] += ", op STRING, seq BIGINT"
    data["views"]["per_category"] = {"sql": "SELECT order_id, category FROM enriched"}
    with pytest.raises(
        ConfigError,
        match="views.per_category.sql: a projection over the JOIN or UNION ALL view 'enriched', whose rows may repeat",
    ):
        parse_project(data, file="lakeview.toml", root=tmp_path)
