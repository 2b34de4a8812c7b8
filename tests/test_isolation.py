"""Failure isolation, as a user of `lakeview up` sees it: one view's epoch hits a terminal error,
that view alone is parked as FAILED (status, the status API, /metrics say so with the error and
the epoch) while the other view keeps committing and a DuckDB reader keeps reading through the
catalog; `resume` restarts the failed view, which then catches up exactly once."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from catalog_api.ops import view_tables as tables
from catalog_api.ops.status import view_statuses
from lakeview.cli.generator import land_json
from lakeview.cli.main import main
from lakeview.ivm import oracle
from lakeview.ops.parking import parked
from lakeview.sql.duck import connect_catalog
from lakeview.stack.embedded import EmbeddedStack
from tests.pipelines import view_pipeline
from tests.spark_jobs.test_crash import project_on_disk
from tests.waiting import wait_for

SQL = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM events GROUP BY k"
NAMESPACE = "isolation"


def _project(tmp_path: Path, lake_dir: Path, names: dict[str, str]):
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": 0},
        "sources": {"events": {"format": "json", "path": str(tmp_path / "landing"), "schema": "k STRING, v BIGINT"}},
        "views": {
            view: {"sql": SQL, "format": fmt, "cadence": "1s", "namespace": NAMESPACE} for view, fmt in names.items()
        },
    }
    return project_on_disk(tmp_path, data)


def _batch(i: int) -> list[dict]:
    return [{"k": f"k{j % 3}", "v": i * 10 + j} for j in range(4)]


def _status(uri: str, view: str) -> dict:
    return httpx.get(f"{uri}/lakeview/v1/views/{view}", timeout=10).json()


def _epoch(project, view: str) -> int | None:
    history = tables.commit_history(project, view)
    return history[0].epoch if history else None


def test_a_failed_view_is_parked_alone_and_resumes_exactly_once(
    spark, lake_dir: Path, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    healthy, broken = f"{unique_name[:40]}_ok", f"{unique_name[:40]}_bad"
    project = _project(tmp_path, lake_dir, {healthy: "iceberg", broken: "delta"})
    landing = project.source_path("events")
    monkeypatch.setenv("LAKEVIEW_FAULT", f"error:{broken}:1")
    stack = EmbeddedStack(project, port=0).start_catalog()
    base = stack.catalog_uri.removesuffix("/iceberg")
    reads: list[int] = []
    read_errors: list[str] = []
    stop_reading = threading.Event()

    def read() -> None:  # a reader of the healthy view, through the catalog, the whole time
        while not stop_reading.wait(0.3):
            try:
                con = connect_catalog(stack.catalog_uri, project.lake.name)
                reads.append(con.sql(f"SELECT count(*) FROM lake.{NAMESPACE}.{healthy}").fetchone()[0])
                con.close()
            except Exception as exc:
                read_errors.append(f"{exc.__class__.__name__}: {exc}")

    reader = threading.Thread(target=read, daemon=True)
    try:
        land_json(landing, "0.json", _batch(0))
        stack.start_views(spark=spark, isolate=True)
        wait_for(lambda: _epoch(project, healthy) == 0 and _epoch(project, broken) == 0, 120, "epoch 0 of both views")
        reader.start()
        land_json(landing, "1.json", _batch(1))
        failed = wait_for(lambda: (s := _status(base, broken))["state"] == "FAILED" and s, 120, f"{broken} FAILED")
        assert failed["failed_epoch"] == 1 and "injected terminal error at epoch 1" in failed["error"]
        assert failed["degraded_reason"] == "FAILED", "the reason says parked, not just stopped"
        assert failed["epoch"] == 0, "the last committed epoch is still served"
        land_json(landing, "2.json", _batch(2))
        wait_for(lambda: _epoch(project, healthy) == 2, 120, f"{healthy} to go on to epoch 2")
        assert _epoch(project, broken) == 0 and broken in stack.parked and not stack.halted

        # Every place status is shown says the same.
        listed = {s["view"]: s for s in httpx.get(f"{base}/lakeview/v1/views", timeout=10).json()["views"]}
        assert listed[broken]["state"] == "FAILED" and listed[broken]["failed_epoch"] == 1
        assert listed[healthy]["state"] == "committed" and listed[healthy]["error"] is None
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        assert f'lakeview_view_state{{state="FAILED",view="{broken}"}} 1.0' in metrics
        assert f'lakeview_view_state{{state="COMMITTED",view="{healthy}"}} 1.0' in metrics
        assert f'lakeview_view_failed_epoch{{view="{broken}"}} 1.0' in metrics
        assert f'lakeview_view_degraded{{reason="FAILED",view="{broken}"}} 1.0' in metrics
        assert f'lakeview_view_degraded{{reason="FAILED",view="{healthy}"}} 0.0' in metrics
        capsys.readouterr()
        main_exit(["status", "--json", "-p", str(project.root / "lakeview.toml")])
        statuses = {s["view"]: s for s in json.loads(capsys.readouterr().out)}
        assert (statuses[broken]["state"], statuses[broken]["failed_epoch"]) == ("FAILED", 1)
        assert statuses[broken]["degraded_reason"] == "FAILED" and statuses[healthy]["degraded_reason"] != "FAILED"

        # Resume through the status API: the view replays epoch 1 and catches up.
        monkeypatch.delenv("LAKEVIEW_FAULT")
        answer = httpx.post(f"{base}/lakeview/v1/views/{broken}/resume", timeout=10)
        assert answer.status_code == 202, answer.text
        wait_for(lambda: _epoch(project, broken) == 2, 120, f"{broken} to catch up to epoch 2")
        assert parked(project, broken) is None and broken not in stack.parked
        again = httpx.post(f"{base}/lakeview/v1/views/{healthy}/resume", timeout=10)
        assert again.status_code == 400 and "not FAILED" in again.json()["error"]["message"]
    finally:
        stop_reading.set()
        if reader.is_alive():
            reader.join(timeout=10)
        stack.stop()

    assert read_errors == [] and len(reads) > 3, f"the reader saw {read_errors[:3]}"
    expected = oracle.recompute(project, broken, oracle.landed_files(landing))
    for view in (healthy, broken):
        comparison = oracle.compare(tables.read_rows(project, view), expected)
        assert comparison.equal, f"{view}: {comparison.describe()}"
    epochs = [c.epoch for c in reversed(tables.commit_history(project, broken))]
    assert epochs == [0, 1, 2], "each epoch applied once, none skipped"
    (after,) = [s for s in view_statuses(project) if s.view == broken]
    assert after.state == "committed" and after.error is None and after.degraded_reason != "FAILED"


def test_status_reports_an_unreadable_table_as_failed(
    tmp_path: Path, lake_dir: Path, unique_name: str, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    good, bad = f"{unique_name[:40]}_ok", f"{unique_name[:40]}_bad"
    project = _project(tmp_path, lake_dir, {good: "iceberg", bad: "delta"})
    log = Path(project.table_location(bad)) / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("this is not a Delta log\n")
    capsys.readouterr()
    main_exit(["status", "--json", "-p", str(project.root / "lakeview.toml")])
    statuses = {s["view"]: s for s in json.loads(capsys.readouterr().out)}
    assert statuses[bad]["state"] == "FAILED" and statuses[bad]["error"].startswith("table unreadable:")
    assert statuses[good]["state"].startswith("not created") and statuses[good]["error"] is None
    monkeypatch.setenv("COLUMNS", "400")  # the table's error column, unwrapped
    main_exit(["status", "-p", str(project.root / "lakeview.toml")])
    shown = capsys.readouterr().out
    assert "FAILED" in shown and "table unreadable" in shown


def main_exit(argv: list[str]) -> None:
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, None), f"lakeview {' '.join(argv)} exited {exc.code}"


def test_up_exits_non_zero_when_every_view_failed_and_a_restart_resumes(
    tmp_path: Path, lake_dir: Path, unique_name: str
) -> None:
    import os
    import signal
    import subprocess
    import sys

    from catalog_api.server import free_port

    cli = [sys.executable, "-m", "lakeview.cli"]
    view = f"{unique_name[:40]}_v"
    project = _project(tmp_path, lake_dir, {view: "delta"})
    port = free_port("127.0.0.1")
    config = project.root / "lakeview.toml"
    config.write_text(config.read_text().replace("port = 0", f"port = {port}"))
    land_json(project.source_path("events"), "0.json", _batch(0))
    env = {**os.environ, "LAKEVIEW_FAULT": f"error:{view}:0"}
    first = subprocess.run([*cli, "up", "-p", str(config)], capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 1, first.stdout + first.stderr
    assert f"view {view} FAILED at epoch 0" in first.stderr and "nothing can run" in first.stderr
    out = subprocess.run([*cli, "status", "--json", "-p", str(config)], capture_output=True, text=True)
    [status] = json.loads(out.stdout)
    assert (status["state"], status["failed_epoch"]) == ("FAILED", 0) and "injected terminal error" in status["error"]
    refused = subprocess.run([*cli, "resume", view, "--wait", "0", "-p", str(config)], capture_output=True, text=True)
    assert refused.returncode == 1 and "no running `lakeview up` picked it up" in refused.stderr

    env.pop("LAKEVIEW_FAULT")
    second = subprocess.Popen(
        [*cli, "up", "-p", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        wait_for(lambda: _epoch(project, view) == 0, 180, "the restarted view's epoch 0")
        second.send_signal(signal.SIGTERM)
        output, _ = second.communicate(timeout=60)
    finally:
        if second.poll() is None:
            second.kill()
    assert second.returncode == 0 and "stopped." in output, output
    assert parked(project, view) is None
    comparison = oracle.compare(
        tables.read_rows(project, view),
        oracle.recompute(project, view, oracle.landed_files(project.source_path("events"))),
    )
    assert comparison.equal, comparison.describe()
    not_failed = subprocess.run([*cli, "resume", view, "-p", str(config)], capture_output=True, text=True)
    assert not_failed.returncode == 2 and "is not FAILED" in not_failed.stderr


def test_a_transient_error_is_retried_and_the_epoch_applied_once(
    spark, catalog_server, lake_dir: Path, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:

    view = f"{unique_name[:40]}_v"
    project = _project(tmp_path, lake_dir, {view: "delta"})
    monkeypatch.setenv("LAKEVIEW_FAULT", f"transient:{view}:1:2")  # epoch 1 fails twice, then passes
    pipeline = view_pipeline(spark, project, view, catalog_server.uri)
    pipeline.prepare()
    query = pipeline.start()
    try:
        for i in range(2):
            land_json(project.source_path("events"), f"{i}.json", _batch(i))
            query.processAllAvailable()
    finally:
        query.stop()
    from spark_jobs import faults

    assert faults.transient_raised[(f"lakeview_{view}", 1)] == 2, "the injected transient error was raised twice"
    assert query.exception() is None and parked(project, view) is None
    assert [c.epoch for c in reversed(tables.commit_history(project, view))] == [0, 1]
    comparison = oracle.compare(
        tables.read_rows(project, view),
        oracle.recompute(project, view, oracle.landed_files(project.source_path("events"))),
    )
    assert comparison.equal, comparison.describe()


def test_a_parked_view_group_resumes_from_its_last_committed_epoch_exactly_once(
    spark, lake_dir: Path, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group's members share one query and one transaction per epoch: a terminal error parks
    them all at that epoch (with the reason FAILED), and resuming any one of them restarts the
    group, which replays the failed epoch once for every member and catches up."""
    group = f"g{unique_name[:30]}"
    first, second = f"{unique_name[:40]}_a", f"{unique_name[:40]}_b"
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": 0},
        "sources": {"events": {"format": "json", "path": str(tmp_path / "landing"), "schema": "k STRING, v BIGINT"}},
        "views": {
            first: {"sql": SQL, "cadence": "1s", "namespace": NAMESPACE, "group": group},
            second: {
                "sql": "SELECT k, MAX(v) AS top FROM events GROUP BY k",
                "cadence": "1s",
                "namespace": NAMESPACE,
                "group": group,
            },
        },
    }
    project = project_on_disk(tmp_path, data)
    landing = project.source_path("events")
    monkeypatch.setenv("LAKEVIEW_FAULT", f"error:{group}:1")
    stack = EmbeddedStack(project, port=0).start_catalog()
    base = stack.catalog_uri.removesuffix("/iceberg")
    try:
        land_json(landing, "0.json", _batch(0))
        stack.start_views(spark=spark, isolate=True)
        wait_for(lambda: _epoch(project, first) == 0 and _epoch(project, second) == 0, 120, "the group's epoch 0")
        land_json(landing, "1.json", _batch(1))
        for view in (first, second):
            status = wait_for(lambda v=view: (s := _status(base, v))["state"] == "FAILED" and s, 120, f"{view} FAILED")
            assert (status["failed_epoch"], status["epoch"], status["degraded_reason"]) == (1, 0, "FAILED")
        land_json(landing, "2.json", _batch(2))

        monkeypatch.delenv("LAKEVIEW_FAULT")
        answer = httpx.post(f"{base}/lakeview/v1/views/{second}/resume", timeout=10)
        assert answer.status_code == 202, answer.text
        wait_for(lambda: _epoch(project, first) == 2 and _epoch(project, second) == 2, 120, "the group at epoch 2")
        assert parked(project, first) is None and parked(project, second) is None and not stack.parked
    finally:
        stack.stop()
    files = oracle.landed_files(landing)
    for view in (first, second):
        comparison = oracle.compare(tables.read_rows(project, view), oracle.recompute(project, view, files))
        assert comparison.equal, f"{view}: {comparison.describe()}"
        epochs = [c.epoch for c in reversed(tables.commit_history(project, view))]
        assert epochs == [0, 1, 2], f"{view}: each epoch applied once, none skipped"
        (after,) = [s for s in view_statuses(project) if s.view == view]
        assert after.state == "committed" and after.degraded_reason != "FAILED"
