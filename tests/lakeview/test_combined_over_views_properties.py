"""A JOIN (inner, LEFT) or UNION ALL reading views, property-tested: two change feeds (random
inserts, updates, deletes per epoch; NULL join keys; several changes of one key in a batch;
several products per product id) -> keyed aggregate views and a projection over them -> a join
or union view reading those views (and, for the LEFT JOIN, a feed directly). Each epoch runs
what the pipeline runs, with DuckDB standing in for Spark's per-batch SQL and in-memory tables:
each upstream view maintained from its feed (:meth:`ViewMaintainer.apply_changes`), its rows
before and after the commit consolidated into a Z-set (:func:`writers.snapshot_diff.consolidate`:
the change the publisher derives from the commit's files, consolidated the same way; tables
here are in memory, so fast), and the combined view (:class:`CombinedMaintainer`, built as
:class:`spark_jobs.multi_source.CombinedPipeline` builds it) fed the unread changes of every
upstream — a join side reads only the columns the join needs — and the feed's newest change per
key. The combined view skips random epochs (no batch) and then reads every epoch's change since
at once. After every batch it equals its SQL recomputed over the upstream views' current rows."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lakeview.config.models import ChangeFeedConfig, ProjectConfig
from lakeview.ivm.changefeed import OP, latest_sql, operation_sql
from lakeview.ivm.combine import CombinedMaintainer
from lakeview.ivm.commits import Epoch
from lakeview.ivm.maintain import ViewMaintainer
from lakeview.ivm.oracle import compare
from lakeview.project import parse_project
from lakeview.sql.dag import upstreams_of, view_key
from lakeview.sql.duck import arrow_sql
from lakeview.sql.joins import JoinPlan
from lakeview.sql.plan import WEIGHT, KeyedAggregatePlan
from lakeview.sql.planner import plan_view
from tests.lakeview.duck_batch import feed_source_toml, spark_sql
from tests.lakeview.memory_writer import MemoryWriter
from writers.snapshot_diff import consolidate

PROJECT = (
    feed_source_toml(
        "orders", "order_id BIGINT, product_id BIGINT, quantity BIGINT, price BIGINT, op STRING, seq BIGINT", "order_id"
    )
    + feed_source_toml("products", "sku BIGINT, product_id BIGINT, category STRING, op STRING, seq BIGINT", "sku")
    + """
# the upstream views: a projection and two keyed aggregates (NULL group keys included)
[views.lines]
sql = "SELECT order_id, product_id, quantity * price AS amount FROM orders"
[views.sales]
sql = "SELECT product_id, SUM(quantity) AS q, COUNT(*) AS n, MAX(price) AS hi FROM orders GROUP BY product_id"
[views.stock]
sql = "SELECT product_id, COUNT(*) AS skus, MIN(category) AS cat FROM products GROUP BY product_id"

# (1) inner JOIN of two aggregate views: on their keys, and many-to-many on values under an aggregate
[views.paired]
sql = "SELECT s.product_id, s.q, s.n, k.skus, k.cat FROM sales s JOIN stock k ON s.product_id = k.product_id"
[views.paired_by_count]
sql = "SELECT k.cat AS cat, SUM(s.q) AS q, COUNT(*) AS c, MAX(s.hi) AS hi FROM sales s JOIN stock k ON s.n = k.skus WHERE s.q > -4 GROUP BY k.cat"

# (2) LEFT JOIN of a view with a change feed (both ways round, and under an aggregate)
[views.named]
sql = "SELECT l.order_id, l.amount, p.sku, p.category FROM lines l LEFT JOIN products p ON l.product_id = p.product_id"
[views.named_by_category]
sql = "SELECT p.category AS category, SUM(l.amount) AS total, COUNT(*) AS n, COUNT(p.sku) AS matched FROM lines l LEFT JOIN products p ON l.product_id = p.product_id GROUP BY p.category"
[views.stocked]
sql = "SELECT p.sku, p.category, s.q, s.n FROM products p LEFT JOIN sales s ON p.product_id = s.product_id"

# (3) UNION ALL of two views (a projection and an aggregate; two aggregates under a GROUP BY)
[views.both]
sql = "SELECT product_id AS id, amount AS x FROM lines UNION ALL SELECT product_id AS id, q AS x FROM sales WHERE n > 1"
[views.both_by_id]
sql = "SELECT id, SUM(x) AS s, COUNT(*) AS c FROM (SELECT product_id AS id, q AS x FROM sales UNION ALL SELECT product_id AS id, skus AS x FROM stock) AS u GROUP BY id"
"""
)
SCHEMAS = {
    "orders": pa.schema(
        [
            ("order_id", pa.int64()),
            ("product_id", pa.int64()),
            ("quantity", pa.int64()),
            ("price", pa.int64()),
            ("op", pa.string()),
            ("seq", pa.int64()),
        ]
    ),
    "products": pa.schema(
        [
            ("sku", pa.int64()),
            ("product_id", pa.int64()),
            ("category", pa.string()),
            ("op", pa.string()),
            ("seq", pa.int64()),
        ]
    ),
}
UPSTREAMS = {"lines": "orders", "sales": "orders", "stock": "products"}  # each upstream view and the feed it reads
COMBINED = ["paired", "paired_by_count", "named", "named_by_category", "stocked", "both", "both_by_id"]

order_change = st.tuples(
    st.sampled_from(["I", "U", "D"]),
    st.integers(0, 6),  # order_id
    st.one_of(st.none(), st.integers(0, 3)),  # product_id: a NULL join key / group key
    st.one_of(st.none(), st.integers(-3, 4)),  # quantity
    st.integers(0, 3),  # price
)
product_change = st.tuples(
    st.sampled_from(["I", "U", "D"]),
    st.integers(0, 5),  # sku: several per product id
    st.one_of(st.none(), st.integers(0, 3)),  # product_id
    st.one_of(st.none(), st.sampled_from(["a", "b"])),  # category
)
epochs = st.lists(
    st.tuples(
        st.lists(order_change, max_size=6), st.lists(product_change, max_size=4), st.booleans()
    ),  # bool: the combined view runs
    min_size=1,
    max_size=4,
)


@cache
def project() -> ProjectConfig:
    """The project, validated once (its checks parse every view's SQL); no file is touched."""
    return parse_project(tomllib.loads(PROJECT), file="lakeview.toml", root=Path("."))


@cache
def duck_sql(sql: str) -> str:
    return spark_sql(sql)


def recompute(sql: str, **relations: pa.Table) -> pa.Table:
    """A view's (Spark) SQL in DuckDB over the relations it reads (one connection for all: fast)."""
    return arrow_sql(duck_sql(sql), **relations)


def latest_changes(feed: ChangeFeedConfig, batch: pa.Table) -> pa.Table:
    """tests.lakeview.duck_batch.latest_changes on the shared connection, without ``__lv_rn``."""
    tagged = arrow_sql(f"SELECT *, {duck_sql(operation_sql(feed))} AS {OP} FROM b", b=batch)
    return arrow_sql(duck_sql(latest_sql(feed, "t")), t=tagged).drop(["__lv_rn"])


class Feeds:
    """The feeds' batches and current rows, kept the obvious way (the recompute's input)."""

    def __init__(self) -> None:
        self.current: dict[str, dict[int, dict]] = {"orders": {}, "products": {}}
        self.seq = 0

    def batch(self, source: str, changes: list[tuple]) -> pa.Table:
        rows = []
        for change in changes:
            self.seq += 1
            if source == "orders":
                op, key, product_id, quantity, price = change
                row = {"order_id": key, "product_id": product_id, "quantity": quantity, "price": price}
            else:
                op, key, product_id, category = change
                row = {"sku": key, "product_id": product_id, "category": category}
            row |= {"op": op, "seq": self.seq}
            rows.append(row)
            if op == "D":
                self.current[source].pop(key, None)
            else:
                self.current[source][key] = row
        return pa.Table.from_pylist(rows, schema=SCHEMAS[source])

    def rows(self, source: str) -> pa.Table:
        return pa.Table.from_pylist(list(self.current[source].values()), schema=SCHEMAS[source])


class Pipeline:
    """The upstream views a combined view reads, and the combined view, as the pipeline keeps
    them; the combined view's unread input waits in ``pending`` until it runs a batch."""

    def __init__(self, view: str) -> None:
        self.project = project()
        self.view = view
        self.sql = self.project.views[view].sql
        self.plan = plan_view(view, self.sql)
        self.upstreams = upstreams_of(self.project, view)
        self.feeds_read = [s for s in self.plan.sources if s in self.project.sources]
        self.upstream: dict[str, ViewMaintainer] = {}
        for name in self.upstreams:
            plan = plan_view(name, self.project.views[name].sql)
            state = (
                [MemoryWriter() for _ in range(1 + len(plan.multisets))] if isinstance(plan, KeyedAggregatePlan) else []
            )
            feed = UPSTREAMS[name]
            self.upstream[name] = ViewMaintainer(
                plan=plan,
                view=MemoryWriter(),
                state=state,
                feed=self.project.sources[feed].changes,
                mirror=MemoryWriter(),
                source_columns=SCHEMAS[feed].names,
            )
        top = self.plan.top
        feeds = {s: self.project.sources[s].changes for s in self.feeds_read}
        self.combined = CombinedMaintainer(  # as CombinedPipeline builds it: upstream views are deleting sources
            plan=self.plan,
            view=MemoryWriter(),
            state=[MemoryWriter() for _ in range(1 + len(top.multisets))]
            if isinstance(top, KeyedAggregatePlan)
            else [],
            sides=[MemoryWriter(), MemoryWriter()] if isinstance(self.plan, JoinPlan) else [],
            feeds=feeds,
            mirrors={s: MemoryWriter() for s in feeds},
            source_columns={s: SCHEMAS[s].names for s in self.feeds_read},
            deleting=set(self.upstreams),
        )
        assert self.combined.view_key == view_key(self.project, view), "the DAG's key of the view is the maintainer's"
        self.pending: dict[str, list[pa.Table]] = {s: [] for s in self.plan.sources}
        self.batches = 0
        self.empty = {name: self.recompute_upstream(name, Feeds()).schema.empty_table() for name in self.upstreams}

    def recompute_upstream(self, name: str, feeds: Feeds) -> pa.Table:
        return recompute(self.project.views[name].sql, **{UPSTREAMS[name]: feeds.rows(UPSTREAMS[name])})

    def upstream_rows(self, name: str) -> pa.Table:
        """An upstream view's stored rows (its recompute's columns and types when still empty)."""
        rows = self.upstream[name].view.rows
        if rows is None or rows.num_columns == 0:
            return self.empty[name]
        return rows.select(self.empty[name].column_names)

    def run_epoch(self, number: int, batches: dict[str, pa.Table], runs: bool) -> bool:
        """One epoch of every upstream view; the combined view runs a batch when ``runs``.
        Returns whether it ran."""
        for name, m in self.upstream.items():
            before = self.upstream_rows(name)
            latest = latest_changes(m.feed, batches[UPSTREAMS[name]])
            m.apply_changes(Epoch(view=name, number=number, frontier={}), latest)
            after = self.upstream_rows(name)
            zset = consolidate(before, after, after.schema)  # the published change file
            if zset.num_rows:
                self.pending[name].append(zset)
        for source in self.feeds_read:
            if batches[source].num_rows:
                self.pending[source].append(batches[source])
        if not runs or not any(self.pending.values()):
            return False  # Spark runs no batch without new files
        inputs = {source: self._input(source) for source in self.plan.sources}
        self.combined.apply(Epoch(view=self.view, number=self.batches, frontier={}), inputs)
        self.batches += 1
        self.pending = {s: [] for s in self.plan.sources}
        return True

    def _input(self, source: str) -> pa.Table:
        """What CombinedPipeline._process_batch hands the maintainer for one source: a feed's
        newest change per key over every file read; an upstream view's change rows with their
        weights, only the columns a join side reads."""
        if source in self.feeds_read:
            batch = pa.concat_tables(self.pending[source]) if self.pending[source] else SCHEMAS[source].empty_table()
            return latest_changes(self.project.sources[source].changes, batch)
        empty = self.upstream_rows(source).slice(0, 0)
        columns = empty.column_names
        if isinstance(self.plan, JoinPlan):
            columns = [c for side in self.plan.sides if side.source == source for c in side.columns]
        zsets = self.pending[source] or [consolidate(empty, empty, empty.schema)]
        return pa.concat_tables(zsets).select([*columns, WEIGHT])

    def expected(self, feeds: Feeds) -> pa.Table:
        relations = {name: self.upstream_rows(name) for name in self.upstreams}
        relations |= {source: feeds.rows(source) for source in self.feeds_read}
        return recompute(self.sql, **relations)

    def rows(self, expected: pa.Table) -> pa.Table:
        rows = self.combined.view.rows
        return rows if rows is not None and rows.num_columns else expected.schema.empty_table()


def run_history(view: str, history: list[tuple[list, list, bool]]) -> None:
    pipeline = Pipeline(view)
    feeds = Feeds()
    for number, (orders, products, runs) in enumerate(history):
        batches = {"orders": feeds.batch("orders", orders), "products": feeds.batch("products", products)}
        last = number == len(history) - 1
        if not pipeline.run_epoch(number, batches, runs or last):
            continue
        for name in pipeline.upstreams:  # the inputs themselves are right
            result = compare(pipeline.upstream_rows(name), pipeline.recompute_upstream(name, feeds))
            assert result.equal, f"epoch {number}, upstream {name}: {result.describe()}"
        expected = pipeline.expected(feeds)
        result = compare(pipeline.rows(expected), expected)
        assert result.equal, f"epoch {number}, {view} (batch {pipeline.batches - 1}): {result.describe()}"


def test_every_combined_view_reads_views() -> None:
    for view in COMBINED:
        pipeline = Pipeline(view)
        assert pipeline.upstreams, view
        assert pipeline.combined.view_key is not None, f"{view}: its upstreams retract rows, so it is keyed"


@pytest.mark.parametrize("view", COMBINED)
@settings(max_examples=5, deadline=None)  # 7 views x 6 runs: under 30 s
@given(history=epochs)
@example(
    history=[  # an aggregate row updated, a NULL key, a skipped batch, then rows deleted and a key emptied
        (
            [("I", 1, 1, 2, 3), ("I", 2, 1, 1, 1), ("I", 3, None, 4, 2)],
            [("I", 1, 1, "a"), ("I", 2, 1, "b"), ("I", 3, None, "a")],
            True,
        ),
        ([("U", 2, 2, 1, 1), ("I", 4, 1, 3, 0)], [("U", 2, 2, "b")], False),
        ([("D", 1, None, None, 0), ("D", 4, None, None, 0)], [("D", 1, None, None), ("I", 4, 2, None)], True),
    ]
)
def test_join_or_union_over_views_equals_the_recompute_after_every_batch(
    view: str, history: list[tuple[list, list, bool]]
) -> None:
    run_history(view, history)
