"""Grouped views under the embedded stack: one streaming query per group commits every member's
table — views, state tables, mirrors — in one catalog transaction. A DuckDB reader joining the
two views while commits run always finds them at one epoch, equal to a recompute over the files
of that epoch's frontier; a restart (after a stop or a SIGKILL) applies no epoch twice."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import pyarrow.compute as pc
from pyiceberg.catalog.rest import RestCatalog

from catalog_api.ops.status import view_statuses
from catalog_api.server import CatalogServer
from lakeview.cli.generator import land_json, make_orders
from lakeview.config.cadence import parse_cadence
from lakeview.config.models import SparkConfig
from lakeview.ivm import oracle
from lakeview.ops.runtime import read_runtime
from lakeview.ops.source_log import files_up_to
from lakeview.sql.duck import connect_catalog
from lakeview.stack.embedded import EmbeddedStack
from tests.conftest import SALES_SQL
from tests.waiting import wait_for
from writers.staged_files import WRITTEN_BY

NS = "group_pipeline_tests"
STATS_SQL = (
    "SELECT product_id, COUNT(*) AS n, AVG(quantity) AS avg_q, MAX(quantity) AS max_q FROM orders GROUP BY product_id"
)


def grouped_project(make_project, name: str, **more: dict):
    views = {
        f"{name}_sums": {"sql": SALES_SQL, "cadence": "200ms", "namespace": NS, "group": name},
        f"{name}_stats": {"sql": STATS_SQL, "cadence": "200ms", "namespace": NS, "group": name},
        **{
            f"{name}_{suffix}": {"cadence": "200ms", "namespace": NS, "group": name, **view}
            for suffix, view in more.items()
        },
    }
    return make_project(views=views), f"{name}_sums", f"{name}_stats"


def summary(snapshot) -> dict[str, str]:
    return snapshot.summary.additional_properties if snapshot and snapshot.summary else {}


def epochs_of(table) -> list[int]:
    """The lakeview epoch of every snapshot in the table's history, oldest first."""
    return [int(summary(s)["lakeview.epoch"]) for s in table.snapshots() if "lakeview.epoch" in summary(s)]


def group_tables(stack: EmbeddedStack, group: str) -> dict[str, object]:
    """Every table the group commits (views, state tables), as the catalog has them now."""
    return {name: writer.table() for name, writer in stack.groups[group].tables.items()}


class JoiningReader:
    """Joins the two views from DuckDB, over and over, while the group commits.

    Each observation loads the sums table, then the stats table, then the sums table again; when
    the sums table did not move in between, the catalog held both snapshots at one moment, and
    the grouped commit promises they carry the same epoch. DuckDB then joins the two views at
    exactly those snapshots and the rows are checked against a recompute at that frontier.
    """

    def __init__(self, catalog_server: CatalogServer, project, sums: str, stats: str) -> None:
        self.catalog = RestCatalog("group-reader", uri=catalog_server.uri, warehouse="lakeview")
        self.duck = connect_catalog(catalog_server.uri, "lakeview")
        self.project, self.sums, self.stats = project, sums, stats
        self.epochs: list[int] = []
        self.problems: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="group-reader")

    def _run(self) -> None:
        try:
            while not self.done.is_set():
                self.observe()
        except Exception as exc:
            self.problems.append(f"reader failed: {exc!r}")

    def observe(self) -> None:
        before = self.catalog.load_table((NS, self.sums)).current_snapshot()
        stats = self.catalog.load_table((NS, self.stats)).current_snapshot()
        after = self.catalog.load_table((NS, self.sums)).current_snapshot()
        if before is None or stats is None or after is None or before.snapshot_id != after.snapshot_id:
            return  # nothing yet, or a commit landed while loading: no single moment observed
        s, t = summary(before), summary(stats)
        if s.get("lakeview.epoch") != t.get("lakeview.epoch") or s.get("lakeview.frontier") != t.get(
            "lakeview.frontier"
        ):
            self.problems.append(
                f"one moment, two points in time: sums {s.get('lakeview.epoch')}, stats {t.get('lakeview.epoch')}"
            )
            return
        joined = self.duck.sql(
            f"WITH s AS (SELECT * FROM lake.{NS}.{self.sums} AT (VERSION => {before.snapshot_id})), "
            f"t AS (SELECT * FROM lake.{NS}.{self.stats} AT (VERSION => {stats.snapshot_id})) "
            "SELECT coalesce(s.product_id, t.product_id) AS product_id, s.total_sold, s.orders, t.n, t.avg_q, t.max_q "
            "FROM s FULL JOIN t ON s.product_id = t.product_id"
        ).to_arrow_table()
        epoch = int(s["lakeview.epoch"])
        files = files_up_to(
            self.project.checkpoint_path(self.sums), json.loads(s["lakeview.frontier"])["orders"]["log_offset"]
        )
        for view, columns in (
            (self.sums, ["product_id", "total_sold", "orders"]),
            (self.stats, ["product_id", "n", "avg_q", "max_q"]),
        ):
            comparison = oracle.compare(
                joined.select(columns).filter(pc.is_valid(joined[columns[1]])),
                oracle.recompute(self.project, view, files),
            )
            if not comparison.equal:
                self.problems.append(f"epoch {epoch}, {view}: {comparison.describe()}")
        mismatched = [r for r in joined.to_pylist() if r["orders"] != r["n"]]
        if mismatched:
            self.problems.append(f"epoch {epoch}: the views disagree on order counts: {mismatched[:3]}")
        self.epochs.append(epoch)


def assert_group_matches_recompute(tables: dict[str, object], project, views: tuple[str, ...], files: int) -> None:
    assert len(tables) == len(views) + 2, "the views, the AVG/COUNT view's group state and its MAX multiset"
    assert_together_and_recomputed(tables, project, views, files)


def assert_together_and_recomputed(tables: dict[str, object], project, views: tuple[str, ...], files: int) -> None:
    """Every table of the group holds the same epochs, each once, and every view equals its recompute over the
    ``files`` landed orders files."""
    histories = {name: epochs_of(table) for name, table in tables.items()}
    reference = histories[views[0]]
    for name, history in histories.items():
        assert history == sorted(set(history)), f"{name}: an epoch applied twice: {history}"
        assert history == reference, f"{name} moved apart from {views[0]}: {history} vs {reference}"
    landed = oracle.landed_files(project.source_path("orders"))
    assert len(landed) == files
    con = connect_catalog(project.catalog_uri, "lakeview")
    for view in views:
        stored = con.sql(f"SELECT * FROM lake.{NS}.{view}").to_arrow_table()
        comparison = oracle.compare(stored, oracle.recompute(project, view, landed))
        assert comparison.equal, f"{view}: {comparison.describe()}"


def test_grouped_views_commit_together_while_duckdb_joins_them(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    group = unique_name[-40:]
    project, sums, stats = grouped_project(make_project, group)
    landing = project.source_path("orders")
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    reader = JoiningReader(catalog_server, project, sums, stats)
    try:
        assert stack.queries[sums] is stack.queries[stats], "one streaming query for the group"
        assert sorted(stack.groups) == [group]
        reader.thread.start()
        for i in range(8):  # files land continuously, about one per trigger
            land_json(landing, f"f{i}.json", make_orders(60, seed=100 + i, first_id=1 + i * 60))
            if i == 1:  # the reader has seen a first epoch before the rest lands (a busy machine may be slow)
                wait_for(lambda: reader.epochs or reader.problems, timeout=180, what="the reader's first observation")
            threading.Event().wait(0.6)
        stack.queries[sums].processAllAvailable()
        tables = group_tables(stack, group)
        for view in (sums, stats):  # each member still has its own heartbeat for `lakeview status`
            heartbeat = wait_for(
                lambda v=view: (r := read_runtime(project, v)) and r.processed_files == 8 and r,
                what=f"{view}'s heartbeat",
                timeout=120,
            )
            assert heartbeat.query_active and heartbeat.pending_files == 0 and heartbeat.failed is None
        statuses = {s.view: s for s in view_statuses(project)}  # what `lakeview status` prints
        assert [statuses[v].running and statuses[v].state for v in (sums, stats)] == ["committed", "committed"]
        assert statuses[sums].epoch == statuses[stats].epoch == epochs_of(tables[sums])[-1]
    finally:
        reader.done.set()
        reader.thread.join(timeout=60)
        stack.stop_views()
    reader.observe()  # the final state too
    assert not reader.problems, reader.problems[:5]
    assert len(set(reader.epochs)) >= 2, f"the reader saw too few epochs to mean anything: {sorted(set(reader.epochs))}"
    assert_group_matches_recompute(tables, project, (sums, stats), files=8)


def test_group_restart_continues_without_applying_an_epoch_twice(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    group = unique_name[-40:]
    # A third member, an append view: batches past driver_rows_max are written by Spark's
    # executors, and their data files join the group's transaction too.
    project, sums, stats = grouped_project(
        make_project, group, big={"sql": "SELECT order_id, product_id, quantity FROM orders WHERE quantity >= 2"}
    )
    project = project.model_copy(update={"spark": SparkConfig(driver_rows_max=60)})
    big = f"{group}_big"
    landing = project.source_path("orders")
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        land_json(landing, "a.json", make_orders(80, seed=1, first_id=1))
        stack.queries[sums].processAllAvailable()
        land_json(landing, "b.json", make_orders(40, seed=2, first_id=101))
        stack.queries[sums].processAllAvailable()
        tables = group_tables(stack, group)
    finally:
        stack.stop_views()
    assert_group_matches_recompute(tables, project, (sums, stats, big), files=2)
    written_by = [summary(s).get(WRITTEN_BY) for s in tables[big].snapshots()]
    assert written_by == ["executors", None], (
        "the 80-order batch was written by executors, the 40-order one by the driver"
    )

    # Stopped: more files land; a new stack continues from the group's checkpoint.
    land_json(landing, "c.json", make_orders(30, seed=3, first_id=201))
    land_json(landing, "d.json", make_orders(20, seed=4, first_id=301))
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        stack.queries[stats].processAllAvailable()
        tables = group_tables(stack, group)
    finally:
        stack.stop_views()
    assert_group_matches_recompute(tables, project, (sums, stats, big), files=4)
    for name, table in tables.items():
        assert summary(table.current_snapshot())["lakeview.rows-in"] == "50", (
            f"{name}: only the files landed while stopped were read"
        )

    # A crash after the group's commit but before Spark recorded the batch: the replay is skipped
    # for every member (no new snapshot anywhere).
    commits = project.checkpoint_path(sums) / "commits"
    assert commits == project.checkpoint_path(stats) / "commits"
    newest = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(newest)).unlink()
    (commits / f".{newest}.crc").unlink(missing_ok=True)
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        before = {name: len(t.snapshots()) for name, t in group_tables(stack, group).items()}
        stack.queries[sums].processAllAvailable()
        tables = group_tables(stack, group)
    finally:
        stack.stop_views()
    assert {name: len(t.snapshots()) for name, t in tables.items()} == before, (
        "the replayed epoch was skipped by every table"
    )
    assert_group_matches_recompute(tables, project, (sums, stats, big), files=4)


def test_refreshing_one_member_of_a_manual_group_refreshes_the_whole_group(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    group = unique_name[-40:]
    project, sums, stats = grouped_project(make_project, group)
    project = project.model_copy(
        update={
            "views": {
                name: view.model_copy(update={"cadence": parse_cadence("manual")})
                for name, view in project.views.items()
            }
        }
    )
    landing = project.source_path("orders")
    land_json(landing, "a.json", make_orders(50, seed=5, first_id=1))
    land_json(landing, "b.json", make_orders(30, seed=6, first_id=51))
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views([stats], spark=spark, available_now=True)  # what `lakeview refresh STATS` does
    try:
        stack.queries[stats].awaitTermination()
        tables = group_tables(stack, group)
    finally:
        stack.stop_views()
    assert_group_matches_recompute(tables, project, (sums, stats), files=2)
    assert {name: epochs_of(table) for name, table in tables.items()} == {name: [0] for name in tables}, (
        "one snapshot per table"
    )


def test_sigkill_mid_group_commit_then_restart_commits_every_table_once(spark, tmp_path: Path) -> None:
    """`lakeview refresh` of a member, killed with every table's data files written but before the
    group's transaction: nothing moved, and the restart leaves each of the seven tables (two views,
    their state tables and change-feed mirrors) with epoch 0 once."""
    from collections import Counter

    from catalog_api.store.catalog import open_store
    from tests.spark_jobs.test_changes import EPOCHS, FEED, SCHEMA, land
    from tests.spark_jobs.test_crash import SQL, project_on_disk, refresh
    from tests.spark_jobs.test_view_dag import refresh_in_process

    data = {
        "lake": {"warehouse": "lake"},
        "server": {"port": 0},
        "sources": {"changes": {"format": "json", "path": "landing", "schema": SCHEMA, "changes": FEED}},
        "views": {
            "crashy": {"sql": SQL, "cadence": "manual", "namespace": "crash", "group": "g"},
            "counts": {
                "sql": "SELECT product_id, COUNT(*) AS n FROM changes GROUP BY product_id",
                "cadence": "manual",
                "namespace": "crash",
                "group": "g",
            },
        },
    }
    project = project_on_disk(tmp_path, data)
    land(project.source_path("changes"), "000.json", EPOCHS[0])
    land(project.source_path("changes"), "001.json", EPOCHS[1])

    names = [  # each view, its state log and its change feed's mirror
        "crashy",
        "__lv_state_crashy_g_log",
        "__lv_state_crashy_src_changes",
        "counts",
        "__lv_state_counts_g_log",
        "__lv_state_counts_src_changes",
    ]
    assert refresh(tmp_path, "before_group_commit:0") == -signal.SIGKILL
    store = open_store(project)
    assert {name: epochs_of(store.load_table(("crash", name))) for name in names} == {name: [] for name in names}, (
        "no table moved"
    )
    # The restart in this process (one JVM start less); a kill after the commit, before Spark's checkpoint:
    # the replay test above.
    refresh_in_process(spark, project, ["crashy"])

    for view in ("crashy", "counts"):
        comparison = oracle.compare(
            store.load_table(("crash", view)).scan().to_arrow(), oracle.recompute(project, view)
        )
        assert comparison.equal, f"{view}: {comparison.describe()}"
    for name in names:
        epochs = Counter(summary(s).get("lakeview.epoch") for s in store.load_table(("crash", name)).snapshots())
        epochs.pop(None, None)
        assert epochs == {"0": 1}, f"{name}: {epochs}"
