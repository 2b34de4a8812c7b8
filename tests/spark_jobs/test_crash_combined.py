"""Exactly once under SIGKILL for the newer view kinds: a JOIN reading two materialized views
(with a view reading the join view, so it publishes its changes), a UNION ALL of two Delta
views (itself Delta), and a watermarked tumbling window over a change feed. Steps without a fault run in this process on the shared Spark
session; each fault is a `lakeview refresh VIEW` subprocess that kills itself through the
LAKEVIEW_FAULT hook (spark_jobs.faults). After the restarts each view equals its recompute,
every table holds each epoch at most once, and the view holds every epoch that changed it."""

from __future__ import annotations

import json
import signal
from collections import Counter
from datetime import timedelta
from pathlib import Path

from deltalake import DeltaTable

from catalog_api.ops import view_tables as tables
from catalog_api.store.catalog import open_store
from lakeview.config.models import ProjectConfig
from lakeview.ivm import oracle
from lakeview.stack.chain_oracle import expected_rows, over_relations
from spark_jobs.sources.quarantine import quarantined_rows
from spark_jobs.sources.view_changes import reader_path
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_crash import project_on_disk
from tests.spark_jobs.test_view_dag import BATCHES, FEED, SCHEMA, refresh_in_process, refresh_in_subprocess
from tests.spark_jobs.test_windows import CHANGE_EPOCHS, CHANGES_SCHEMA, T0, WINDOW_OVER_CHANGES

NAMESPACE = "crash"


def write_project(tmp_path: Path, sources: dict, views: dict) -> ProjectConfig:
    for view in views.values():
        view.update({"cadence": "manual", "namespace": NAMESPACE})
    data = {"lake": {"warehouse": "lake"}, "server": {"port": 0}, "sources": sources, "views": views}
    return project_on_disk(tmp_path, data)


def orders_project(tmp_path: Path, views: dict) -> ProjectConfig:
    """A project of ``views`` over the orders change feed (test_view_dag's batches land there)."""
    return write_project(
        tmp_path, {"orders": {"format": "json", "path": "landing", "schema": SCHEMA, "changes": FEED}}, views
    )


def land_and_refresh(spark, project: ProjectConfig, number: int, views: list[str]) -> None:
    """Batch ``number`` of test_view_dag's BATCHES landed, then ``views`` refreshed in this process."""
    land(project.source_path("orders"), f"{number:03d}.json", BATCHES[number])
    refresh_in_process(spark, project, views)


def epochs_per_table(project: ProjectConfig, view: str) -> dict[str, Counter]:
    """Snapshots per epoch of the view's table and of each of its state tables."""
    store = open_store(project)
    names = [view] + [n for _, n in store.list_tables((NAMESPACE,)) if n.startswith(f"__lv_state_{view}_")]
    counts = {}
    for name in names:
        table = store.load_table((NAMESPACE, name))
        epochs = Counter(s.summary.additional_properties.get("lakeview.epoch") for s in table.snapshots() if s.summary)
        epochs.pop(None, None)
        counts[name] = epochs
    return counts


def assert_each_epoch_once(project: ProjectConfig, view: str, view_epochs: set[str] | None, state_tables: int) -> None:
    """No table of the view holds an epoch twice; the view holds ``view_epochs`` (every epoch that changed it)."""
    counts = epochs_per_table(project, view)
    assert len(counts) == 1 + state_tables, sorted(counts)
    for name, epochs in counts.items():
        assert set(epochs.values()) <= {1}, f"{name}: an epoch committed twice: {epochs}"
    assert view_epochs is None or set(counts[view]) == view_epochs, (
        f"{view}: epochs {sorted(counts[view])}, expected {sorted(view_epochs)}"
    )


def test_sigkill_join_over_views_and_its_publication(spark, tmp_path: Path) -> None:
    """An aggregate over a JOIN of two views (lines x sales; an operator graph), read by an aggregate (per_n).
    Killed: before the join view's one transaction commits its tables (epoch 0), between its
    commits and the publication of its change for per_n (epoch 1), after the publication but
    before Spark's checkpoint (epoch 2)."""
    lines, sales, joined, per_n = "lines", "sales", "joined", "per_n"
    views = {
        lines: {"sql": "SELECT order_id, product_id, quantity * price AS amount FROM orders"},
        sales: {"sql": f"SELECT product_id, SUM(amount) AS revenue, COUNT(*) AS n FROM {lines} GROUP BY product_id"},
        joined: {
            "sql": f"SELECT s.product_id, COUNT(*) AS n, SUM(l.amount) AS amount, MIN(l.amount) AS lo, MAX(s.revenue) AS revenue "
            f"FROM {lines} l JOIN {sales} s ON l.product_id = s.product_id GROUP BY s.product_id"
        },
        per_n: {"sql": f"SELECT n, COUNT(*) AS k, SUM(amount) AS total FROM {joined} GROUP BY n"},
    }
    project = orders_project(tmp_path, views)
    upstreams = [lines, sales]

    land_and_refresh(spark, project, 0, upstreams)
    assert refresh_in_subprocess(tmp_path, joined, "before_view_commit:0") == -signal.SIGKILL
    counts = epochs_per_table(project, joined)
    assert not any(counts.values()), f"killed before the one transaction of its tables: {counts}"
    refresh_in_process(spark, project, [joined, per_n])  # the replay commits every table once

    land_and_refresh(spark, project, 1, upstreams)
    assert refresh_in_subprocess(tmp_path, joined, "before_publish:1") == -signal.SIGKILL
    assert tables.last_commit(project, joined).epoch == 1
    assert json.loads((reader_path(project, joined, per_n) / "_published.json").read_text())["epoch"] == 0, (
        "killed before publishing"
    )

    land_and_refresh(spark, project, 2, upstreams)
    # The restart publishes epoch 1 (prepare), skips its replay, commits and publishes epoch 2, dies.
    assert refresh_in_subprocess(tmp_path, joined, "after_commit:2") == -signal.SIGKILL
    assert json.loads((reader_path(project, joined, per_n) / "_published.json").read_text())["epoch"] == 2
    refresh_in_process(spark, project, [joined, per_n])  # the replay of epoch 2 publishes nothing new

    current = {view: tables.read_rows(project, view) for view in (lines, sales, joined)}
    for view in (joined, per_n):
        comparison = oracle.compare(tables.read_rows(project, view), over_relations(project.views[view].sql, current))
        assert comparison.equal, f"{view}: {comparison.describe()}"
        record = tables.last_commit(project, view)
        at_frontier, how = expected_rows(project, view, record)  # what `lakeview verify` checks
        comparison = oracle.compare(tables.read_rows(project, view, record.snapshot_id), at_frontier)
        assert comparison.equal, f"{view} at its frontier ({how}): {comparison.describe()}"
    # the join view: its view and its operators' state log (Iceberg: one table)
    assert_each_epoch_once(project, joined, {"0", "1", "2"}, state_tables=1)
    assert_each_epoch_once(project, per_n, None, state_tables=1)
    assert tables.last_commit(project, per_n).frontier[joined]["upstream_epoch"] == 2, (
        "per_n read every published epoch"
    )


def delta_epochs_per_table(project: ProjectConfig, view: str) -> dict[str, Counter]:
    """Commits per epoch (the commit info's ``lakeview.epoch``) of a Delta view's table and of
    each of its state tables (Delta tables next to it)."""
    base = Path(project.table_location(view)).parent
    counts = {}
    for path in sorted(base.iterdir()):
        if path.name == view or path.name.startswith(f"__lv_state_{view}_"):
            epochs = Counter(e.get("lakeview.epoch") for e in DeltaTable(str(path)).history())
            epochs.pop(None, None)
            counts[path.name] = epochs
    return counts


def test_sigkill_union_of_delta_views(spark, tmp_path: Path) -> None:
    """A UNION ALL of two Delta views (lines, sales), itself Delta: a multiset keyed by the
    whole row, since the upstreams retract rows. Killed before its view commit (epoch 0: the
    Delta writer's commit, nothing of the epoch in its table) and after its commit, before
    Spark's checkpoint (epoch 1: the replay finds the epoch in the Delta log's app transaction).
    Epoch 1 retracts rows the union holds several copies of (a Delta MERGE upserting them failed)."""
    lines, sales, both = "lines", "sales", "both"
    views = {
        lines: {"sql": "SELECT order_id, product_id, quantity * price AS amount FROM orders"},
        sales: {"sql": f"SELECT product_id, SUM(amount) AS revenue, COUNT(*) AS n FROM {lines} GROUP BY product_id"},
        both: {"sql": f"SELECT product_id, amount FROM {lines} UNION ALL SELECT product_id, revenue FROM {sales}"},
    }
    for view in views.values():
        view["format"] = "delta"
    project = orders_project(tmp_path, views)
    upstreams = [lines, sales]

    land_and_refresh(spark, project, 0, upstreams)
    assert refresh_in_subprocess(tmp_path, both, "before_view_commit:0") == -signal.SIGKILL
    assert not delta_epochs_per_table(project, both).get(both), "killed before the view's commit"
    land_and_refresh(spark, project, 1, upstreams)
    # The restart replays epoch 0, applies epoch 1 (the new upstream changes), commits and dies.
    assert refresh_in_subprocess(tmp_path, both, "after_commit:1") == -signal.SIGKILL
    assert tables.last_commit(project, both).epoch == 1
    refresh_in_process(spark, project, [both])  # Spark replays epoch 1: the Delta log has it, nothing commits

    current = {view: tables.read_rows(project, view) for view in upstreams}
    comparison = oracle.compare(tables.read_rows(project, both), over_relations(project.views[both].sql, current))
    assert comparison.equal, comparison.describe()
    record = tables.last_commit(project, both)
    at_frontier, how = expected_rows(project, both, record)  # what `lakeview verify` checks
    comparison = oracle.compare(tables.read_rows(project, both, record.snapshot_id), at_frontier)
    assert comparison.equal, f"at its frontier ({how}): {comparison.describe()}"
    for view in views:
        for name, epochs in delta_epochs_per_table(project, view).items():
            assert set(epochs.values()) <= {1}, f"{name}: an epoch committed twice: {epochs}"
    counts = delta_epochs_per_table(project, both)
    assert set(counts[both]) == {"0", "1"}, f"every epoch changed the union: {counts}"
    assert tables.last_commit(project, both).frontier[sales]["upstream_epoch"] == 1, (
        "read every published epoch of sales"
    )


def test_sigkill_watermarked_window_over_a_change_feed(spark, tmp_path: Path) -> None:
    """A tumbling window with a 10-minute watermark over a change feed (updates, deletes, late
    images). Killed just before the one catalog transaction of its view, state tables and mirror
    (epoch 1); the restart replays epoch 1 under the watermark it had, then applies epoch 2. (A kill
    after the commit, before Spark's checkpoint, takes the same path as for the views of
    test_crash.py: every table has the epoch, so the replay changes nothing.)"""
    view = "windowed"
    sources = {"order_changes": {"format": "json", "path": "landing", "schema": CHANGES_SCHEMA, "changes": FEED}}
    project = write_project(tmp_path, sources, {view: {"sql": WINDOW_OVER_CHANGES, "watermark": "10 minutes"}})
    landing = project.source_path("order_changes")

    land(landing, "000.json", CHANGE_EPOCHS[0])
    refresh_in_process(spark, project, [view])
    land(landing, "001.json", CHANGE_EPOCHS[1])
    assert refresh_in_subprocess(tmp_path, view, "before_view_commit:1") == -signal.SIGKILL
    counts = epochs_per_table(project, view)
    assert all("1" not in epochs for epochs in counts.values()), (
        f"killed before epoch 1's one transaction (the view, its state tables, its mirror): no table has it: {counts}"
    )
    land(landing, "002.json", CHANGE_EPOCHS[2])
    refresh_in_process(spark, project, [view])  # replays epoch 1 (the watermark it had), then epoch 2

    record = tables.last_commit(project, view)
    files = oracle.frontier_files(project, view, record.frontier)
    comparison = oracle.compare(tables.read_rows(project, view), oracle.recompute(project, view, files))
    assert comparison.equal, comparison.describe()
    assert len(files["order_changes"]) == 3, "every landed file is in the frontier"
    rows = {
        (r["window_start"].strftime("%H:%M"), r["product_id"]): (r["n"], r["total"], r["lo"], r["hi"])
        for r in tables.read_rows(project, view).to_pylist()
    }
    assert rows == {
        ("00:00", 1): (2, 12.0, 5.0, 7.0),
        ("00:10", 2): (1, 10.0, 10.0, 10.0),
        ("00:40", 1): (1, 9.0, 9.0, 9.0),
    }
    late = sorted(json.loads(r["record"])["order_id"] for r in quarantined_rows(project, "order_changes", view))
    assert late == [1, 2, 6], "each late image set aside once"
    assert record.extra["lakeview.watermark-us"] == str(int((T0 + timedelta(minutes=25)).timestamp() * 1_000_000)), (
        "as without a crash"
    )
    assert_each_epoch_once(project, view, {"0", "1", "2"}, state_tables=2)  # the state log, the feed's mirror
