"""``GET /lakeview/v1/views/{name}/plan`` over HTTP from the real catalog server, for a per-shape view
and an operator-graph view (no Spark: a plan is read from the project's config)."""

from __future__ import annotations

from pathlib import Path

import httpx

from catalog_api.ops.routes import lakeview_app_options
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from lakeview.project import parse_project

STAR = """SELECT c.region, p.category, COUNT(*) AS n
FROM orders o JOIN products p ON o.pid = p.id JOIN customers c ON o.cid = c.id
GROUP BY c.region, p.category"""


def test_the_plan_route_explains_a_graph_view_and_a_per_shape_view(tmp_path: Path) -> None:
    sources = {
        "orders": "oid BIGINT, pid BIGINT, cid BIGINT",
        "products": "id BIGINT, category STRING",
        "customers": "id BIGINT, region STRING",
    }
    project = parse_project(
        {
            "lake": {"warehouse": str(tmp_path / "warehouse")},
            "sources": {n: {"format": "json", "path": str(tmp_path / n), "schema": s} for n, s in sources.items()},
            "views": {
                "star": {"sql": STAR, "namespace": "shop"},
                "per_product": {"sql": "SELECT pid, COUNT(*) AS n FROM orders GROUP BY pid", "namespace": "shop"},
            },
        },
        root=tmp_path,
    )
    store = CatalogStore(f"sqlite:///{tmp_path / 'catalog.db'}", tmp_path / "warehouse", "lakeview")
    with CatalogServer(store, host="127.0.0.1", port=0, **lakeview_app_options(project, store)) as server:
        star = httpx.get(f"http://{server.authority}/lakeview/v1/views/star/plan")
        per_product = httpx.get(f"http://{server.authority}/lakeview/v1/views/per_product/plan")
        missing = httpx.get(f"http://{server.authority}/lakeview/v1/views/nope/plan")
    assert star.status_code == 200, star.text
    text = star.json()["text"]
    assert "operator graph" in text and "__lv_state_star_g_" in text, text
    assert star.json()["graph"], "the console draws the graph view's operators"
    assert per_product.status_code == 200 and "per_product" in per_product.json()["text"]
    assert missing.status_code == 404, missing.text
