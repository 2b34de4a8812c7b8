"""A change feed's mirror kept as Z-set state (SourceMirrors) in an Iceberg table through the real REST
catalog: after every epoch of random inserts, updates and deletes the mirror gives the feed's current row per
key, whether its table is an append log (folded whenever it outgrows the mirror) or keyed; a restart (a new
SourceMirrors over the same tables, reading them whole) carries on; the table read back with pyiceberg nets
to exactly the current rows; an epoch computed but never committed leaves no trace."""

from __future__ import annotations

import random
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog

from catalog_api.server import CatalogServer
from lakeview.config.models import ChangeFeedConfig
from lakeview.graph import WEIGHT
from lakeview.ivm.changefeed import DELETE, INSERT, OP, UPDATE, normalize
from lakeview.ivm.commits import Epoch
from lakeview.sql.duck import arrow_sql
from writers import graph_state
from writers.graph_mirrors import SourceMirrors, mirror_schema
from writers.graph_state import Replacement
from writers.graph_table_rows import ClusteredRows, mirror_rows
from writers.iceberg.group import IcebergGroupWriter
from writers.iceberg.writer import IcebergWriter

SCHEMA = pa.schema([("id", pa.int64()), ("pid", pa.int64()), ("amount", pa.int64())])
FEED = ChangeFeedConfig(operation="op", key=["id"], sequence="seq")


def mirrors_over(
    catalog: RestCatalog, name: str, append_log: bool, row_group: int | None = None
) -> tuple[SourceMirrors, IcebergGroupWriter]:
    """The mirror of ``orders`` in table ``name``; with ``row_group``, in row groups of that many rows and past
    the driver's bound: looked up by its row groups' key ranges, nothing held (what a restart past
    ``[spark] driver_keys_max`` makes of it, spark_jobs.executors.graph_backfill.bound_memory)."""
    writer = IcebergWriter(catalog, "graph_mirror_tests", name)
    properties = {"lakeview.state-of": name}
    if row_group is not None:
        properties["write.parquet.row-group-limit"] = str(row_group)
    writer.ensure_table(mirror_schema(SCHEMA), ("id",), properties)
    mirrors = SourceMirrors({"orders": writer}, {"orders": ("id",)}, {"orders": SCHEMA}, append_log=append_log)
    if row_group is not None:
        memory = mirrors.store.memory["orders"]
        mirrors.store.memory["orders"] = mirror_rows(writer, memory.key, memory.schema, memory.duck)
    return mirrors, IcebergGroupWriter(catalog, name, {writer.table_name: writer})


def batch(rng: random.Random, current: dict[int, tuple[int, int]], size: int) -> pa.Table:
    """The newest change per key of one epoch (inserts, updates, deletes of present keys); updates ``current``."""
    rows = []
    for key in rng.sample(range(60), size):
        if key in current and rng.random() < 0.3:
            rows.append((key, None, None, DELETE))
            del current[key]
        else:
            current[key] = (rng.randrange(5), rng.randrange(100))
            rows.append((key, *current[key], INSERT if rng.random() < 0.5 else UPDATE))
    names = ["id", "pid", "amount", OP]
    return pa.table(
        {n: [r[i] for r in rows] for i, n in enumerate(names)}, schema=SCHEMA.append(pa.field(OP, pa.string()))
    )


def as_set(rows: pa.Table) -> set[tuple]:
    return {(r["id"], r["pid"], r["amount"]) for r in rows.to_pylist()}


def one_epoch(mirrors, group, name: str, number: int, latest: pa.Table, before: dict) -> int:
    """Look up, apply and commit one epoch's changes ``latest`` (epoch 3 is first computed and never committed,
    its outcome unknown: the retry reads the table again); the old rows found are ``before``'s. Returns the
    folds the commit made."""
    if number == 3:
        mirrors.begin({})
        zset, _ = normalize(latest, mirrors.old("orders", latest.select(["id"])), FEED, SCHEMA.names)
        mirrors.apply("orders", zset.cast(mirror_schema(SCHEMA)))
        mirrors.changes()
    mirrors.begin({})
    old = mirrors.old("orders", latest.select(["id"]))
    assert as_set(old) == {(k, *before[k]) for k in latest.column("id").to_pylist() if k in before}
    zset, _ = normalize(latest, old, FEED, SCHEMA.names)
    mirrors.apply("orders", zset.cast(mirror_schema(SCHEMA)))
    changes = mirrors.changes()
    group.commit(Epoch(view=name, number=number, frontier={}), changes)  # type: ignore[arg-type]
    mirrors.committed()
    return sum(isinstance(c, Replacement) for c in changes.values())


@pytest.mark.parametrize("table", ["log_folded", "keyed"])
def test_a_mirror_gives_the_current_rows_across_folds_a_lost_epoch_and_a_restart(
    catalog_server: CatalogServer, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(graph_state, "FOLD_SLACK", 10)  # a fold every few epochs
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    name = f"mirror_{table}_{uuid.uuid4().hex[:8]}"
    append_log = table != "keyed"
    mirrors, group = mirrors_over(catalog, name, append_log)
    rng = random.Random(5)
    current: dict[int, tuple[int, int]] = {}
    folds = 0
    for number in range(10):
        if number == 6:  # a restart: the mirror is read from its table
            mirrors, group = mirrors_over(catalog, name, append_log)
        before = dict(current)
        folds += one_epoch(mirrors, group, name, number, batch(rng, current, 12), before)
        everything = mirrors.old("orders", pa.table({"id": pa.array(range(60), pa.int64())}))
        assert as_set(everything) == {(k, *v) for k, v in current.items()}, f"epoch {number}"
    stored = catalog.load_table(("graph_mirror_tests", name)).scan().to_arrow()
    netted = arrow_sql(f"SELECT id, pid, amount FROM t GROUP BY ALL HAVING SUM({WEIGHT}) <> 0", t=stored)
    assert as_set(netted) == {(k, *v) for k, v in current.items()}
    assert (folds > 0) == append_log


def test_a_mirror_past_the_bound_reads_only_the_row_groups_that_can_hold_the_keys(
    catalog_server: CatalogServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the driver's bound a mirror's log is never held: each lookup reads the row groups (3 rows each here)
    whose key range can hold an asked key, every file of the log sorted by the key (folds too). Across epochs of
    inserts, updates and deletes, a lost epoch and a restart, the mirror gives the current rows, and one key
    costs at most one row group per file, not the log."""
    monkeypatch.setattr(graph_state, "FOLD_SLACK", 40)  # a fold every few epochs
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    name = f"mirror_ranges_{uuid.uuid4().hex[:8]}"
    mirrors, group = mirrors_over(catalog, name, True, row_group=3)
    rng = random.Random(11)
    current: dict[int, tuple[int, int]] = {}
    folds = 0
    for number in range(10):
        if number == 6:
            mirrors, group = mirrors_over(catalog, name, True, row_group=3)
        before = dict(current)
        folds += one_epoch(mirrors, group, name, number, batch(rng, current, 12), before)
        rows = mirrors.store.memory["orders"]
        assert isinstance(rows, ClusteredRows) and rows.runs is None, "past the bound nothing is held"
        everything = mirrors.old("orders", pa.table({"id": pa.array(range(60), pa.int64())}))
        assert as_set(everything) == {(k, *v) for k, v in current.items()}, f"epoch {number}"
        some = sorted(current)[len(current) // 2]
        one = mirrors.old("orders", pa.table({"id": pa.array([some, 1000, None], pa.int64())}))
        assert as_set(one) == {(some, *current[some])}
        table = catalog.load_table(("graph_mirror_tests", name))
        files = list(table.scan().plan_files())
        groups = sum(len(rows.ranges.footers[f.file.file_path].ranges) for f in files)
        # (a key's old and new image may straddle two row groups)
        assert rows.ranges.row_groups_read <= 2 * len(files) < groups, (rows.ranges.row_groups_read, len(files), groups)
        for f in files:  # every file of the log sorted by the key
            with table.io.new_input(f.file.file_path).open() as stream:
                ids = pq.read_table(stream, columns=["id"]).column("id").to_pylist()
            assert ids == sorted(ids)
    assert folds > 0


def test_a_join_side_that_is_a_feeds_mirror_is_kept_once_in_the_mirror() -> None:
    """A star view's dimension sides are each a change feed's rows by its key: their state is the mirror's (kept
    once, in the mirror); the fact side (pre-aggregated orders), a side keyed by another column and a side read
    through a filter are kept as the join's own state."""
    from lakeview.graph import compile_view
    from lakeview.graph.join import Join
    from writers.graph_mirrors import shared_sides

    schemas = {
        "orders": pa.schema([("id", pa.int64()), ("pid", pa.int64()), ("cid", pa.int64()), ("qty", pa.int32())]),
        "products": pa.schema([("id", pa.int64()), ("category", pa.string()), ("price", pa.float64())]),
        "customers": pa.schema([("id", pa.int64()), ("rid", pa.int64())]),
        "regions": pa.schema([("id", pa.int64()), ("region", pa.string())]),
    }
    star = compile_view(
        "SELECT r.region, p.category, COUNT(*) n, SUM(o.qty*p.price) revenue FROM orders o JOIN products p "
        "ON o.pid=p.id JOIN customers c ON o.cid=c.id JOIN regions r ON c.rid=r.id GROUP BY r.region, p.category",
        schemas,
        {"orders": 1_000_000, "products": 1_000, "customers": 1_000, "regions": 10},
    )
    feeds = {"products": ("id",), "customers": ("id",), "regions": ("id",)}
    shared = shared_sides(star, feeds)
    joins = [op for op in star.operators if isinstance(op, Join)]
    assert len(shared) == 3 and {name.split(".")[0] for name in shared} == {j.id for j in joins}  # a side of each
    assert sorted(source for source, _ in shared.values()) == ["customers", "products", "regions"]
    for source, columns in shared.values():  # every column of the side, by its name in the mirror
        assert sorted(columns.values()) == sorted(schemas[source].names)
    assert shared_sides(star, {"customers": ("rid",)}) == {}  # keyed by another column than the join's
    filtered = compile_view(
        "SELECT o.id, c.rid FROM orders o JOIN customers c ON o.cid = c.id WHERE c.rid > 1", schemas
    )
    assert shared_sides(filtered, feeds) == {}  # the side holds the filtered rows only
