"""Views over views, property-tested: a change feed (random inserts, updates, deletes per epoch)
-> a view -> a view over it (-> a view over that), each published view a real Delta table on a
temp dir. Each epoch runs what the pipeline runs, with DuckDB standing in for Spark's per-batch
SQL: the base view maintained from the feed (:class:`ViewMaintainer.apply_changes`), its commit
published as a Z-set change file derived from the Delta log (:class:`ChangePublisher`,
:mod:`writers.snapshot_diff`), and each downstream maintained from the files it has not read yet
(:meth:`ViewMaintainer.apply_zset`, keyed as :func:`spark_jobs.sources.upstream.upstream_key` derives).
After every epoch each view equals the recompute of the composed SQL over the current source
rows (:func:`lakeview.stack.chain_oracle.over_rows`, through the chain)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakeview.ivm.commits import Epoch
from lakeview.ivm.maintain import ViewMaintainer
from lakeview.ivm.oracle import compare
from lakeview.project import load_project
from lakeview.sql.dag import chain_of, upstream_of
from lakeview.sql.plan import KeyedAggregatePlan
from lakeview.sql.planner import plan_view
from lakeview.stack.chain_oracle import over_rows
from spark_jobs.sources.upstream import upstream_key
from spark_jobs.sources.view_changes import ChangePublisher, parse_change_file, reader_path
from tests.lakeview.duck_batch import duck, feed_source_toml, latest_changes, spark_sql
from tests.lakeview.memory_writer import MemoryWriter
from writers.delta.writer import DeltaWriter

PROJECT = (
    feed_source_toml(
        "orders", "order_id BIGINT, product_id BIGINT, quantity BIGINT, price BIGINT, op STRING, seq BIGINT", "order_id"
    )
    + """
# projection with a computed column -> keyed aggregate -> filter over the aggregate
[views.lines]
sql = "SELECT order_id, product_id, quantity * price AS amount FROM orders"
[views.sales]
sql = "SELECT product_id, SUM(amount) AS revenue, COUNT(*) AS n, MAX(amount) AS hi FROM lines GROUP BY product_id"
[views.big]
sql = "SELECT product_id, revenue, n FROM sales WHERE revenue > 10"

# keyed aggregate over the feed -> an aggregate grouping it by one of its values
[views.per_product]
sql = "SELECT product_id, COUNT(*) AS n, SUM(quantity) AS q FROM orders WHERE quantity > -3 GROUP BY product_id"
[views.by_count]
sql = "SELECT n, COUNT(*) AS products, SUM(q) AS q, MIN(product_id) AS lo FROM per_product GROUP BY n"

# filtered projection -> aggregate with HAVING and COUNT(DISTINCT)
[views.positive]
sql = "SELECT order_id, product_id, quantity * 2 + price AS amount FROM orders WHERE quantity > 0"
[views.repeat_products]
sql = "SELECT product_id, SUM(amount) AS s, COUNT(DISTINCT amount) AS d, MIN(amount) AS lo FROM positive GROUP BY product_id HAVING COUNT(*) >= 2"
"""
)
SCHEMA = pa.schema(
    [
        ("order_id", pa.int64()),
        ("product_id", pa.int64()),
        ("quantity", pa.int64()),
        ("price", pa.int64()),
        ("op", pa.string()),
        ("seq", pa.int64()),
    ]
)
TOPS = ["big", "by_count", "repeat_products"]  # each names its chain: the view and its upstreams

change = st.tuples(
    st.sampled_from(["I", "U", "D", "D"]),
    st.integers(0, 7),  # order_id
    st.one_of(st.none(), st.integers(0, 3)),  # product_id
    st.one_of(st.none(), st.integers(-4, 5)),  # quantity
    st.integers(0, 4),  # price
)
epochs = st.lists(st.lists(change, max_size=8), min_size=1, max_size=4)


class Chain:
    """The views of one chain as the pipeline keeps them: each view's table a Delta table, state
    and mirror in memory; every view but the top publishes its changes to the one reading it."""

    def __init__(self, root: Path, top: str) -> None:
        (root / "lakeview.toml").write_text(PROJECT)
        self.project = load_project(root / "lakeview.toml")
        self.views = chain_of(self.project, top)[::-1]  # base first
        self.maintainers: dict[str, ViewMaintainer] = {}
        self.read: dict[str, set[str]] = {v: set() for v in self.views}  # change files each view has read
        self.epochs: dict[str, int] = {v: 0 for v in self.views}  # each downstream's own batch numbers
        for view in self.views:
            plan = plan_view(view, self.project.views[view].sql)
            state = (
                [MemoryWriter() for _ in range(1 + len(plan.multisets))] if isinstance(plan, KeyedAggregatePlan) else []
            )
            writer = DeltaWriter(str(root / "lake" / view), view)
            if view == self.views[0]:
                feed = self.project.sources["orders"].changes
                m = ViewMaintainer(
                    plan=plan, view=writer, state=state, feed=feed, mirror=MemoryWriter(), source_columns=SCHEMA.names
                )
            else:
                m = ViewMaintainer(plan=plan, view=writer, state=state, feed_key=upstream_key(self.project, view))
            writer.ensure_table(self.recompute(view, SCHEMA.empty_table()).schema, m.view_key, {})
            self.maintainers[view] = m

    def recompute(self, view: str, source: pa.Table) -> pa.Table:
        """``view``'s rows recomputed from the source rows, through its upstreams."""
        sql = self.project.views[view].sql
        upstream = upstream_of(self.project, view)
        if upstream is None:
            return duck(spark_sql(sql), orders=source)
        return over_rows(sql, upstream, self.recompute(upstream, source))

    def run_epoch(self, number: int, batch: pa.Table) -> None:
        base = self.maintainers[self.views[0]]
        feed = base.feed
        latest = latest_changes(feed, batch).drop(["__lv_rn"])
        base.apply_changes(Epoch(view=self.views[0], number=number, frontier={}), latest)
        for upstream, view in zip(self.views, self.views[1:]):
            ChangePublisher(self.project, upstream, self.maintainers[upstream].view).publish()
            zset = self.unread(upstream, view)
            if zset is None:
                continue  # no new file: Spark runs no batch
            self.maintainers[view].apply_zset(Epoch(view=view, number=self.epochs[view], frontier={}), zset)
            self.epochs[view] += 1

    def unread(self, upstream: str, view: str) -> pa.Table | None:
        """The change files ``view`` has not read yet, as one batch (what its file stream reads)."""
        directory = reader_path(self.project, upstream, view)
        new = sorted(p for p in directory.iterdir() if parse_change_file(p.name) and p.name not in self.read[view])
        if not new:
            return None
        self.read[view].update(p.name for p in new)
        return pa.concat_tables([pq.read_table(p) for p in new])

    def rows(self, view: str, expected: pa.Table) -> pa.Table:
        writer = self.maintainers[view].view
        return writer.table().to_pyarrow_table().select(expected.schema.names)


@pytest.mark.parametrize("top", TOPS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=epochs)
def test_every_view_of_a_chain_equals_the_recompute_after_every_epoch(top: str, history: list[list[tuple]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        chain = Chain(Path(tmp), top)
        assert len(chain.views) >= 2
        current: dict[int, dict] = {}
        seq = 0
        for number, changes in enumerate(history):
            rows = []
            for op, order_id, product_id, quantity, price in changes:
                seq += 1
                row = {
                    "order_id": order_id,
                    "product_id": product_id,
                    "quantity": quantity,
                    "price": price,
                    "op": op,
                    "seq": seq,
                }
                rows.append(row)
                if op == "D":
                    current.pop(order_id, None)
                else:
                    current[order_id] = row
            chain.run_epoch(number, pa.Table.from_pylist(rows, schema=SCHEMA))
            source = pa.Table.from_pylist(list(current.values()), schema=SCHEMA)
            for view in chain.views:
                expected = chain.recompute(view, source)
                result = compare(chain.rows(view, expected), expected)
                assert result.equal, (
                    f"epoch {number}, view {view} (chain {' -> '.join(chain.views)}): {result.describe()}"
                )
