"""A running stack with a real Spark view: /lakeview/v1 status routes, /metrics, and the
runtime heartbeat that lets another process tell a running view from a stopped one."""

from __future__ import annotations

import io
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from catalog_api.ops.status import status_table, view_status
from catalog_api.store.catalog import open_store
from lakeview.cli.generator import land_json, make_orders
from lakeview.ops.progress import BackfillProgress, work_progress
from lakeview.ops.runtime import read_runtime
from lakeview.stack.embedded import EmbeddedStack
from tests.conftest import SALES_SQL
from tests.waiting import wait_for


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_status_routes_and_metrics_on_a_running_view(spark, make_project, unique_name: str) -> None:
    view = unique_name
    project = make_project(
        views={view: {"sql": SALES_SQL, "cadence": "1s", "namespace": "ops_tests", "target_lag": "1h"}}
    )
    stack = EmbeddedStack(project, port=0).start_catalog()
    base = stack.catalog_uri.removesuffix("/iceberg")
    try:
        before = httpx.get(f"{base}/lakeview/v1/views/{view}").json()
        assert before["state"].startswith("not created") and before["slo_compliance"] is None

        # History landed before the view starts: its first batch is a backfill, shown as progress.
        land_json(project.source_path("orders"), "a.json", make_orders(50, seed=1))
        screen = io.StringIO()
        backfill = BackfillProgress(
            stack, [view], console=Console(file=screen, force_terminal=True, width=160), interval=0.1
        )
        stack.start_views([view], spark=spark, on_commit=lambda record: backfill.mark_committed(record.view))
        backfill.start()
        stack.queries[view].processAllAvailable()
        backfill._thread.join(timeout=30)  # ends once the view committed
        assert not backfill._thread.is_alive()
        assert f"backfill {view}: files" in screen.getvalue() and "1/1" in screen.getvalue()

        def listed_status() -> dict | None:
            """The view's status once a heartbeat after the commit is published (one per second)."""
            listed = httpx.get(f"{base}/lakeview/v1/views").json()["views"]
            [found] = [s for s in listed if s["view"] == view]
            return found if found["pending_files"] == 0 else None

        status = wait_for(listed_status, timeout=15, what="a heartbeat with nothing pending")
        assert status["state"] == "committed" and status["epoch"] == 0
        assert status["commits"] == 1 and status["rows_in_total"] == 50
        assert status["target_lag_ms"] == 3_600_000 and status["cadence_asked_ms"] == 1000
        assert status["slo_compliance"] == 1.0 and status["degraded_reason"] is None
        assert 0 <= status["freshness_lag_ms"] < 3_600_000
        assert status["running"] is True  # the heartbeat the running stack publishes
        assert status["pending_files"] == 0

        one = httpx.get(f"{base}/lakeview/v1/views/{view}")
        assert one.status_code == 200 and one.json()["snapshot_id"] == status["snapshot_id"]
        missing = httpx.get(f"{base}/lakeview/v1/views/no_such_view")
        assert missing.status_code == 404 and "no_such_view" in missing.json()["error"]["message"]

        metrics = httpx.get(f"{base}/metrics")
        assert metrics.status_code == 200
        values = samples(metrics.text)
        labels = (("view", view),)
        assert values[("lakeview_view_commits_total", labels)] == 1
        assert values[("lakeview_view_rows_in_total", labels)] == 50
        assert values[("lakeview_view_slo_compliance", labels)] == 1.0
        assert values[("lakeview_view_running", labels)] == 1.0
        assert values[("lakeview_view_degraded", (("reason", "STOPPED"), ("view", view)))] == 0.0
        assert values[("lakeview_commit_seconds_count", labels)] >= 1
        routes = {dict(k[1]).get("route") for k in values if k[0] == "lakeview_catalog_request_seconds_count"}
        assert "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}" in routes
        assert "/lakeview/v1/views/{name}" in routes
    finally:
        stack.stop()

    # Another process reading the lake now learns the view is stopped; an hour later (nothing
    # committed meanwhile) the view is out of its SLO and the reason says why.
    assert read_runtime(project, view).stopped
    later = int(time.time() * 1000) + 2 * 3_600_000
    stopped = view_status(project, open_store(project), view, at_ms=later)
    assert stopped.running is False
    assert stopped.degraded_reason == "STOPPED" and stopped.slo_compliance < 1.0
    assert stopped.freshness_lag_ms > 2 * 3_600_000 - 60_000

    console = Console(record=True, width=200)
    console.print(status_table([stopped]))
    assert "STOPPED" in console.export_text()


def test_work_progress_shows_done_of_total_rate_and_eta_only_on_a_terminal() -> None:
    screen = io.StringIO()
    with work_progress(
        "verify v", total=4, unit="files", console=Console(file=screen, force_terminal=True, width=160)
    ) as progress:
        for _ in range(4):
            progress.advance()
    text = screen.getvalue()
    assert "verify v" in text and "4/4" in text and "files/s" in text and "ETA" in text
    piped = io.StringIO()
    with work_progress("verify v", total=4, unit="files", console=Console(file=piped)) as progress:
        progress.advance(4)
    assert piped.getvalue() == ""
