"""Views over views through real Spark: a 3-level chain — a change feed of orders (inserts,
updates, deletes) -> a per-order projection with a computed column (a Delta table) -> a per-product aggregate
-> a filter over the aggregate — started by `lakeview up`'s path (upstreams
first), files landing in several batches. After every batch each view equals a full recompute
of the chain from the base source; and a SIGKILL between the upstream's commit and the
publication of its change still yields the right downstream after a restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from catalog_api.ops import view_tables as tables
from lakeview.cli.main import app
from lakeview.errors import WriterError
from lakeview.ivm import oracle
from lakeview.project import explain_view
from lakeview.stack.chain_oracle import expected_rows, over_rows
from lakeview.stack.embedded import EmbeddedStack
from lakeview.stack.maintenance import maintain_view
from spark_jobs.sources.view_changes import reader_path
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_crash import project_on_disk

SCHEMA = "order_id BIGINT, product_id BIGINT, quantity INT, price DOUBLE, op STRING, seq BIGINT"
FEED = {"operation": "op", "key": ["order_id"], "sequence": "seq", "insert": ["c"], "update": ["u"], "delete": ["d"]}
ROOT = Path(__file__).resolve().parents[2]
_seq = iter(range(1, 100_000))


def order(
    op: str, order_id: int, product_id: int | None = None, quantity: int | None = None, price: float = 2.5
) -> str:
    return json.dumps(
        {
            "order_id": order_id,
            "product_id": product_id,
            "quantity": quantity,
            "price": price,
            "op": op,
            "seq": next(_seq),
        }
    )


BATCHES = [
    [order("c", i, i % 4, i) for i in range(1, 13)],
    [
        order("u", 1, 1, 40),  # a bigger quantity: product 1 grows
        order("u", 2, 3, 2),  # moves order 2 from product 2 to product 3
        order("d", 4),  # product 0 loses an order
        order("d", 8),  # ... and another: left with one, it drops out of the filter view
        order("c", 13, 2, 5, price=10.0),
    ],
    [order("d", i) for i in (1, 5, 9)] + [order("c", 14, 1, 1), order("u", 13, 2, 6, price=10.0)],  # product 1 shrinks
]


def chain(prefix: str) -> tuple[str, str, str, dict]:
    lines, sales, big = f"{prefix}_lines", f"{prefix}_sales", f"{prefix}_big"
    views = {
        lines: {
            "sql": "SELECT order_id, product_id, quantity * price AS amount FROM orders",
            "namespace": "dag_tests",
            "format": "delta",
        },
        sales: {
            "sql": f"SELECT product_id, SUM(amount) AS revenue, COUNT(*) AS n, MAX(amount) AS top FROM {lines} GROUP BY product_id",
            "namespace": "dag_tests",
        },
        big: {"sql": f"SELECT product_id, revenue, n FROM {sales} WHERE n >= 2", "namespace": "dag_tests"},
    }
    return lines, sales, big, views


def full_recompute(project, names: tuple[str, str, str]) -> dict[str, pa.Table]:
    """Each view of the chain recomputed from every landed file of the base source."""
    lines, sales, big = names
    base = oracle.recompute(project, lines, oracle.landed_files(project.source_path("orders")))
    middle = over_rows(project.views[sales].sql, lines, base)
    return {lines: base, sales: middle, big: over_rows(project.views[big].sql, sales, middle)}


def assert_chain_equals_recompute(project, names: tuple[str, str, str], when: str) -> None:
    expected = full_recompute(project, names)
    for view in names:
        stored = tables.read_rows(project, view)
        comparison = oracle.compare(stored, expected[view])
        assert comparison.equal, f"{view} {when}: {comparison.describe()}"
        record = tables.last_commit(project, view)
        at_frontier, how = expected_rows(project, view, record)  # what `lakeview verify` checks
        assert oracle.compare(tables.read_rows(project, view, record.snapshot_id), at_frontier).equal, (
            f"{view} {when}: {how}"
        )


def test_three_level_chain_equals_recompute_after_every_batch(
    spark, catalog_server, make_project, unique_name: str
) -> None:
    names = chain(unique_name[:40])
    lines, sales, big, views = names[0], names[1], names[2], names[3]
    for view in views.values():
        view["cadence"] = "200ms"
    sources = {"orders": {"format": "json", "path": "landing/orders", "schema": SCHEMA, "changes": FEED}}
    project = make_project(views={big: views[big], sales: views[sales], lines: views[lines]}, sources=sources)
    landing = project.source_path("orders")
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        assert list(stack.pipelines) == [lines, sales, big], "upstreams start first"
        for number, batch in enumerate(BATCHES):
            land(landing, f"{number:03d}.json", batch)
            for view in (lines, sales, big):
                stack.queries[view].processAllAvailable()
            assert_chain_equals_recompute(project, (lines, sales, big), f"after batch {number}")
    finally:
        stack.stop_views()
    rows = {r["product_id"]: r for r in tables.read_rows(project, big).to_pylist()}
    assert 0 not in rows, "product 0 fell below 2 orders and left the filter view"
    assert rows[2]["revenue"] == 2.5 * (6 + 10) + 10.0 * 6  # orders 6, 10 and the updated 13 (order 2 moved away)
    left = sorted(p.name for p in reader_path(project, lines, sales).glob("*.parquet"))
    assert len(left) <= 1, (
        f"change files every reader committed are deleted (the newest awaits the next publication): {left}"
    )
    maintain_view(project, lines, catalog_server.uri)
    assert not list(project.changes_path(lines).rglob("*.parquet")), (
        "a maintenance pass deletes what every reader consumed"
    )


def refresh_in_subprocess(project_dir: Path, view: str, fault: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAKEVIEW_FAULT": fault}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakeview.cli", "refresh", view, "-p", str(project_dir)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        proc.communicate(timeout=300)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the JVM it started, if it outlived it
        except ProcessLookupError:
            pass
    return proc.returncode


def refresh_in_process(spark, project, views: list[str]) -> None:
    """`lakeview refresh VIEW` for each view in turn, on the shared Spark session."""
    with EmbeddedStack(project, port=0) as stack:
        for view in views:
            stack.start_views([view], spark=spark, available_now=True)
            stack.queries[view].awaitTermination()


def manual_project(tmp_path: Path, views: dict):  # type: ignore[no-untyped-def]
    """A project on disk of ``views`` at a manual cadence (`lakeview refresh`) over the orders change feed."""
    for view in views.values():
        view["cadence"] = "manual"
    data = {
        "lake": {"warehouse": "lake"},
        "server": {"port": 0},
        "sources": {"orders": {"format": "json", "path": "landing", "schema": SCHEMA, "changes": FEED}},
        "views": views,
    }
    return project_on_disk(tmp_path, data)


def test_crash_between_upstream_commit_and_publication(spark, tmp_path: Path) -> None:
    lines, sales, big, views = chain("crashdag")
    project = manual_project(tmp_path, views)
    landing = project.source_path("orders")
    land(landing, "000.json", BATCHES[0])
    refresh_in_process(spark, project, [lines, sales, big])
    assert_chain_equals_recompute(project, (lines, sales, big), "after the first refresh")

    land(landing, "001.json", BATCHES[1])
    # The upstream commits epoch 1, then dies before publishing its change.
    assert refresh_in_subprocess(tmp_path, lines, "before_publish:1") == -signal.SIGKILL
    assert tables.last_commit(project, lines).epoch == 1
    assert not list(reader_path(project, lines, sales).glob("epoch-000000000001-*")), "killed before the publication"

    # Restart: the replay skips the committed epoch; the change is derived from the snapshot.
    refresh_in_process(spark, project, [lines, sales, big])
    assert_chain_equals_recompute(project, (lines, sales, big), "after the restart")
    published = json.loads((reader_path(project, lines, sales) / "_published.json").read_text())
    assert published["epoch"] == 1

    # `lakeview verify` on the top of the chain recomputes it from the base source.
    result = CliRunner().invoke(app, ["verify", big, "-p", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (
        "equal" in result.output
        and f"files of orders -> {lines}@epoch 1 -> {sales}@epoch 1 -> {big}@epoch" in result.output
    )


def test_views_over_an_append_only_view(spark, catalog_server, make_project, unique_name: str) -> None:
    """An append-only source -> a filtering append view (no key; its change files carry a
    timestamp column) -> a self-mergeable aggregate over it, refreshed batch by batch."""
    from lakeview.cli.generator import land_json, make_orders

    filtered, totals = f"{unique_name[:40]}_f", f"{unique_name[:40]}_t"
    views = {
        filtered: {
            "sql": "SELECT order_id, product_id, quantity, ts FROM orders WHERE quantity > 2",
            "namespace": "dag_tests",
            "cadence": "200ms",
        },
        totals: {
            "sql": f"SELECT product_id, COUNT(*) AS n, SUM(quantity) AS total FROM {filtered} GROUP BY product_id",
            "namespace": "dag_tests",
            "cadence": "200ms",
        },
    }
    project = make_project(views=views)
    landing = project.source_path("orders")
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        for number in range(2):
            land_json(landing, f"{number}.json", make_orders(40, seed=number, first_id=1 + 40 * number))
            for view in (filtered, totals):
                stack.queries[view].processAllAvailable()
            base = oracle.recompute(project, filtered, oracle.landed_files(landing))
            expected = {filtered: base, totals: over_rows(project.views[totals].sql, filtered, base)}
            for view in (filtered, totals):
                columns = [c for c in expected[view].column_names if c != "ts"]  # (naive vs UTC timestamps)
                comparison = oracle.compare(
                    tables.read_rows(project, view).select(columns), expected[view].select(columns)
                )
                assert comparison.equal, f"{view} after batch {number}: {comparison.describe()}"
    finally:
        stack.stop_views()
    assert f"reads the view {filtered}: its changes published in _lakeview/changes/{filtered}/" in explain_view(
        project, totals
    )


def test_a_downstream_rebuilt_after_its_table_is_dropped_starts_from_the_upstreams_state(spark, tmp_path: Path) -> None:
    """The rebuild the error messages advise ("drop the view's table to rebuild it") of views reading a view: after
    two refreshes the upstream's change files for them are consumed and deleted, yet each rebuilt view starts from
    the upstream's whole table. A graph view whose table alone was dropped is refused, naming the state tables that
    hold the old table's state; once they are dropped too it rebuilds."""
    from catalog_api.store.catalog import open_store

    lines, sales, big, views = chain("rebuilt")
    top = "rebuilt_top"
    views[top] = {
        "sql": f"SELECT product_id, revenue FROM {sales} ORDER BY revenue DESC LIMIT 2",
        "namespace": "dag_tests",
    }
    project = manual_project(tmp_path, views)
    landing = project.source_path("orders")
    for number in (0, 1):
        land(landing, f"{number:03d}.json", BATCHES[number])
        refresh_in_process(spark, project, [lines, sales, big, top])
    for reader in (big, top):
        assert not list(reader_path(project, sales, reader).glob("epoch-000000000000-*")), "epoch 0 was consumed"

    store = open_store(project)
    for view in (big, top):  # what a user does to rebuild a view
        store.drop_table(("dag_tests", view), purge=True)
    owned = [n for _, n in store.list_tables(("dag_tests",)) if n.startswith(f"__lv_state_{top}_")]
    with pytest.raises(WriterError, match="its table has no commits but its state table") as refused:
        refresh_in_process(spark, project, [top])  # a graph view's state is of the dropped table: refused
    assert owned and all(name in str(refused.value) for name in owned), refused.value
    for name in owned:  # as the error says
        store.drop_table(("dag_tests", name), purge=True)
    refresh_in_process(spark, project, [big, top])
    assert_chain_equals_recompute(project, (lines, sales, big), "after the rebuild")
    assert_top_equals_recompute(project, sales, top, "after the rebuild")

    land(landing, "002.json", BATCHES[2])
    refresh_in_process(spark, project, [lines, sales, big, top])
    assert_chain_equals_recompute(project, (lines, sales, big), "after the next batch")
    assert_top_equals_recompute(project, sales, top, "after the next batch")


def assert_top_equals_recompute(project, sales: str, top: str, when: str) -> None:
    expected = over_rows(project.views[top].sql, sales, tables.read_rows(project, sales))
    comparison = oracle.compare(tables.read_rows(project, top), expected)
    assert comparison.equal, f"{top} {when}: {comparison.describe()}"
