"""The console at /ui/ in a real headless Chromium over a running stack with four views:

- ``sales`` (keyed aggregate over ``orders``, published to the REST catalog and the filesystem) — fresh;
- ``big_sellers`` (a view over ``sales``) — fresh;
- ``slow_orders`` (cadence 30s against a 2s target lag) — late;
- ``event_log`` (over a Parquet source holding a file that is not Parquet) — its query fails.

Each test asserts what a person sees on the page; screenshots go to /tmp/console-*.png.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from catalog_api.auth.authenticator import hash_secret
from lakeview.cli.generator import land_json, make_orders
from lakeview.project import parse_project
from lakeview.sql.duck import connect
from lakeview.stack.embedded import EmbeddedStack
from tests.conftest import ORDERS_SCHEMA, SALES_SQL
from tests.waiting import wait_for

pytestmark = pytest.mark.spark
SHOTS = Path("/tmp")
WAIT_MS = 60_000  # the page polls every 2 s; a wait, never a timing assertion


def project_data(root: Path, auth: dict[str, Any] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "lake": {"warehouse": str(root / "lake")},
        "server": {"host": "127.0.0.1", "port": 0},
        "console": {"sample_interval": "1s"},
        "sources": {
            "orders": {"format": "json", "path": str(root / "landing" / "orders"), "schema": ORDERS_SCHEMA},
            "events": {
                "format": "parquet",
                "path": str(root / "landing" / "events"),
                "schema": "id BIGINT, kind STRING",
            },
        },
        "views": {
            "sales": {
                "sql": SALES_SQL,
                "cadence": "1s",
                "target_lag": "1h",
                "namespace": "analytics",
                "register": ["filesystem"],
            },
            "big_sellers": {
                "sql": "SELECT product_id, total_sold FROM sales WHERE total_sold > 5",
                "cadence": "1s",
                "target_lag": "1h",
                "namespace": "analytics",
            },
            "slow_orders": {
                "sql": "SELECT order_id, quantity FROM orders",
                "cadence": "30s",
                "target_lag": "2s",
                "namespace": "analytics",
            },
            "event_log": {
                "sql": "SELECT id, kind FROM events",
                "cadence": "1s",
                "target_lag": "1h",
                "namespace": "ops",
            },
        },
    }
    if auth:
        data["auth"] = auth
    return data


@pytest.fixture(scope="module")
def running(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The stack with its views running, once every view reached the state the tests look at."""
    root = tmp_path_factory.mktemp("console")
    project = parse_project(project_data(root), file=str(root / "lakeview.toml"), root=root)
    orders = project.source_path("orders")
    land_json(orders, "a.json", make_orders(50, seed=3))
    (orders / "b.json").write_text(
        '{"order_id": 900, "product_id": 1, "quantity": 2, "ts": "2026-01-01T00:00:00"}\nthis line is not json at all\n'
    )
    events = project.source_path("events")
    events.mkdir(parents=True)
    (events / "bad.parquet").write_bytes(b"not a parquet file, just text")
    stack = EmbeddedStack(project, port=0).start_catalog()
    base = stack.catalog_uri.removesuffix("/iceberg")
    try:
        stack.start_views(spark=spark)

        def settled() -> dict | None:
            cards = {v["view"]: v for v in httpx.get(f"{base}/lakeview/v1/lineage", timeout=10).json()["views"]}
            states = {name: card["console_state"] for name, card in cards.items()}
            want = {"sales": "fresh", "big_sellers": "fresh", "slow_orders": "late", "event_log": "failed"}
            return cards if states == want else None

        cards = wait_for(settled, timeout=240, what="views fresh, late and failed")
        yield {"project": project, "stack": stack, "base": base, "root": root, "cards": cards}
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def page(browser, running: dict[str, Any]):
    page = browser.new_page()
    page.goto(f"{running['base']}/ui/")
    page.wait_for_selector('[data-node="view:event_log"]', timeout=WAIT_MS)
    yield page
    page.close()


def select_view(page, view: str, tab: str = "freshness") -> None:
    page.click(f'#views-table tr[data-view="{view}"]')
    page.click(f'.tabs button[data-tab="{tab}"]')
    title = f"document.getElementById('detail-title').textContent.startsWith('{view} ')"
    page.wait_for_function(title, timeout=WAIT_MS)


def test_lineage_shows_sources_views_and_where_each_is_published_coloured_by_state(page) -> None:
    states = page.eval_on_selector_all(
        "#lineage g.node", "nodes => Object.fromEntries(nodes.map(n => [n.dataset.node, n.dataset.state]))"
    )
    assert states["view:sales"] == "fresh" and states["view:big_sellers"] == "fresh"
    assert states["view:slow_orders"] == "late" and states["view:event_log"] == "failed"
    assert states["source:orders"] == "source" and states["source:events"] == "source"
    assert states["target:rest"] == "target" and states["target:filesystem"] == "target"
    text = page.text_content("#lineage")
    assert "REST catalog (lakeview)" in text and "paths (filesystem)" in text
    # Edges: sales reads orders, big_sellers reads sales (a view over a view).
    assert page.locator("#lineage path.edge").count() >= 8
    legend = page.inner_text("#legend")
    for state in ("fresh", "late", "degraded", "failed", "stopped"):
        assert state in legend
    page.screenshot(path=str(SHOTS / "console-lineage.png"), full_page=True)


def test_the_failed_view_shows_its_reason_and_the_error(page) -> None:
    select_view(page, "event_log")
    error = page.locator("#view-error")
    error.wait_for(state="visible", timeout=WAIT_MS)
    first_line = error.inner_text().splitlines()[0]  # the root cause first, not Spark's stack
    assert "bad.parquet is not a Parquet file" in first_line
    assert page.inner_text("#view-reason") == "failed: SOURCE_ERROR"
    assert page.inner_text("#detail-state") == "failed"
    page.screenshot(path=str(SHOTS / "console-failed.png"), full_page=True)


def test_freshness_chart_plots_lag_against_the_target(page) -> None:
    select_view(page, "slow_orders")
    page.wait_for_function("document.querySelectorAll('#lag-chart circle.point').length >= 2", timeout=WAIT_MS)
    assert page.locator("#lag-chart line.target").count() == 1
    assert "target 2.0s" in page.text_content("#lag-chart")
    assert page.locator("#lag-chart circle.point.late").count() >= 1
    assert page.locator("#rate-chart rect.bar").count() >= 1  # the epoch it committed
    stats = page.inner_text("#freshness-stats")
    assert "SLO compliance" in stats and "epochs / min" in stats
    page.click('button.window[data-window="1d"]')
    page.wait_for_function("document.querySelectorAll('#lag-chart circle.point').length >= 1", timeout=WAIT_MS)
    page.click('button.window[data-window="1h"]')
    page.screenshot(path=str(SHOTS / "console-freshness.png"), full_page=True)


def test_a_snapshots_sql_reads_that_snapshot_in_duckdb(page, running: dict[str, Any]) -> None:
    select_view(page, "sales", tab="snapshots")
    first = page.locator("#snapshots-table tbody tr").filter(has=page.locator("td:first-child", has_text="0")).first
    first.wait_for(timeout=WAIT_MS)
    first.click()
    snapshot_id = first.get_attribute("data-snapshot")
    shown = f"document.getElementById('snapshot-sql').dataset.snapshot === '{snapshot_id}'"
    page.wait_for_function(shown, timeout=WAIT_MS)
    duck = page.inner_text("pre.sql-duckdb")
    assert f"AT (VERSION => {snapshot_id})" in duck
    assert f"VERSION AS OF {snapshot_id}" in page.inner_text("pre.sql-spark")
    assert f"FOR VERSION AS OF {snapshot_id}" in page.inner_text("pre.sql-trino")
    page.click('button.copy[data-engine="duckdb"]')
    # the button says so once the clipboard has the text (an awaited promise), for 1.5 s
    copied = """document.querySelector('button.copy[data-engine="duckdb"]').textContent === 'copied'"""
    page.wait_for_function(copied, timeout=WAIT_MS)
    page.screenshot(path=str(SHOTS / "console-snapshots.png"), full_page=True)

    # The SQL as shown, run in DuckDB: epoch 0 saw the 51 well-formed orders.
    con = connect("avro", "httpfs", "iceberg")
    *setup, select = [s for s in duck.split(";\n") if s.strip()]
    for statement in setup:
        con.execute(statement)
    total = con.execute(f"SELECT SUM(orders) FROM ({select.rstrip(';')})").fetchone()[0]
    assert total == 51


def test_the_plan_is_drawn_as_its_operator_graph(page) -> None:
    select_view(page, "sales", tab="plan")
    page.wait_for_selector('#plan-graph g.op[data-op="aggregate"]', timeout=WAIT_MS)
    kinds = page.eval_on_selector_all("#plan-graph g.op", "ops => ops.map(o => o.dataset.op)")
    assert kinds[0] == "input" and kinds[-1] == "table"
    assert "source" in kinds and "aggregate" in kinds  # the view's operators, its input first
    graph = page.text_content("#plan-graph")
    assert "input orders" in graph and "table analytics.sales" in graph
    assert page.locator("#plan-graph path.edge").count() == len(kinds) - 1
    page.screenshot(path=str(SHOTS / "console-plan.png"), full_page=True)


def test_sources_show_backlog_and_quarantined_rows_with_reason_and_sample(page) -> None:
    orders = page.locator('.source-card[data-source="orders"]')
    orders.locator(".quarantine").wait_for(timeout=WAIT_MS)
    assert "quarantined rows: 1" in orders.inner_text()
    assert "malformed row" in orders.inner_text() and "this line is not json at all" in orders.inner_text()
    assert "backlog: 0 files" in orders.inner_text()
    assert "read by event_log" in page.inner_text('.source-card[data-source="events"]')


def test_the_page_updates_without_a_reload(page, running: dict[str, Any]) -> None:
    marker = page.evaluate("window.__lakeview_marker = Math.random()")
    land_json(running["project"].source_path("orders"), "c.json", make_orders(10, seed=9, first_id=1000))
    page.wait_for_function(
        "document.querySelector('#views-table tr[data-view=\"sales\"] td:nth-child(6)').textContent === '1'",
        timeout=WAIT_MS,
    )
    assert page.evaluate("window.__lakeview_marker") == marker  # the same page: no reload happened


def test_with_auth_a_reader_signs_in_and_sees_only_its_namespaces(browser, running: dict[str, Any]) -> None:
    root: Path = running["root"]
    auth = {
        "mode": "oauth2",
        "clients": {"viewer": {"secret_hash": hash_secret("viewer-secret"), "privileges": {"analytics": "read"}}},
    }
    project = parse_project(project_data(root, auth), file=str(root / "lakeview.toml"), root=root)
    with EmbeddedStack(project, port=0) as stack:  # a second catalog over the same lake, with auth on
        base = stack.catalog_uri.removesuffix("/iceberg")
        refused = httpx.get(f"{base}/lakeview/v1/lineage")
        assert refused.status_code == 401 and "bearer token" in refused.json()["error"]["message"]
        assert httpx.get(f"{base}/ui/").status_code == 200  # the page itself holds no data

        page = browser.new_page()
        try:
            page.goto(f"{base}/ui/")
            page.wait_for_selector("#auth-client", state="visible", timeout=WAIT_MS)
            page.fill("#client-id", "viewer")
            page.fill("#client-secret", "wrong")
            page.click("#auth-client button")
            page.wait_for_selector("#auth-error", state="visible", timeout=WAIT_MS)
            assert "sign-in refused" in page.inner_text("#auth-error")
            page.fill("#client-secret", "viewer-secret")
            page.click("#auth-client button")
            page.wait_for_selector('[data-node="view:slow_orders"]', timeout=WAIT_MS)
            nodes = page.eval_on_selector_all("#lineage g.node", "nodes => nodes.map(n => n.dataset.node)")
            assert "view:sales" in nodes and "view:event_log" not in nodes  # read on analytics only
            select_view(page, "sales", tab="snapshots")
            page.wait_for_selector("pre.sql-duckdb", timeout=WAIT_MS)
            page.screenshot(path=str(SHOTS / "console-auth.png"), full_page=True)
            duck = page.inner_text("pre.sql-duckdb")
            duck = duck.replace("<client_id>", "viewer").replace("<client_secret>", "viewer-secret")
            con = connect("avro", "httpfs", "iceberg")  # the SQL as shown, with the reader's credentials
            attach, select = [s for s in duck.split(";\n") if s.strip()]
            con.execute(attach)
            assert con.execute(f"SELECT SUM(orders) FROM ({select.rstrip(';')})").fetchone()[0] >= 51
            token = page.evaluate("sessionStorage.getItem('lakeview.token')")
            plan = httpx.get(f"{base}/lakeview/v1/views/event_log/plan", headers={"Authorization": f"Bearer {token}"})
            assert plan.status_code == 403 and "read" in json.dumps(plan.json())
        finally:
            page.close()
