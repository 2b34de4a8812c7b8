"""The console's lineage, states and plan graphs from a project's config (no Spark): a join, a view
over a view, Glue/Hive/paths publishing with one registrar failing, and a FAILED status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from catalog_api.ops.console.plan_graph import plan_graph
from catalog_api.ops.console.routes import lineage, view_card
from lakeview.ops.history import console_state
from lakeview.project import explain_view, parse_project

ORDERS = "order_id BIGINT, product_id BIGINT, amount DOUBLE"
PRODUCTS = "product_id BIGINT, category STRING"
BY_CATEGORY = """SELECT p.category AS category, SUM(o.amount) AS total, COUNT(*) AS n
FROM orders AS o JOIN products AS p ON o.product_id = p.product_id GROUP BY p.category"""


def project(tmp_path: Path):
    return parse_project(
        {
            "lake": {"warehouse": str(tmp_path / "lake")},
            "hive": {"uri": "thrift://127.0.0.1:9083"},
            "sources": {
                "orders": {"format": "json", "path": str(tmp_path / "orders"), "schema": ORDERS},
                "products": {"format": "json", "path": str(tmp_path / "products"), "schema": PRODUCTS},
            },
            "views": {
                "by_category": {"sql": BY_CATEGORY, "namespace": "shop", "register": ["glue", "hive"]},
                "top_categories": {
                    "sql": "SELECT category, total FROM by_category WHERE total > 100",
                    "namespace": "shop",
                    "format": "delta",
                    "register": ["filesystem"],
                },
            },
        },
        root=tmp_path,
    )


def card(config: Any, view: str, **status: Any) -> dict[str, Any]:
    return view_card(config, {"view": view, "state": "committed", **status})


def test_lineage_of_a_join_and_a_view_over_it_with_where_each_is_published(tmp_path: Path) -> None:
    config = project(tmp_path)
    cards = [
        card(config, "by_category", freshness_lag_ms=500, target_lag_ms=120_000),
        card(
            config, "top_categories", freshness_lag_ms=300_000, target_lag_ms=120_000, degraded_reason="FALLING_BEHIND"
        ),
    ]
    published = {
        "by_category": {
            "glue": {"registered": True, "location": "s3://b/shop/by_category"},
            "hive": {"reason": "REGISTRAR_DOWN", "error": "connection refused"},
        }
    }
    graph = lineage(config, cards, published)
    states = {n["id"]: n.get("state") for n in graph["nodes"]}
    assert states == {
        "view:by_category": "fresh",
        "view:top_categories": "late",
        "source:orders": None,
        "source:products": None,
        "target:rest": None,
        "target:glue": None,
        "target:hive": None,
        "target:filesystem": None,
    }
    edges = {(e["from"], e["to"]): e for e in graph["edges"]}
    assert ("source:orders", "view:by_category") in edges and ("source:products", "view:by_category") in edges  # join
    assert ("view:by_category", "view:top_categories") in edges  # a view over a view
    assert edges[("view:by_category", "target:glue")]["state"] == "ok"
    assert edges[("view:by_category", "target:hive")] == {
        "from": "view:by_category",
        "to": "target:hive",
        "state": "failing",
        "error": "connection refused",
        "location": None,
    }
    assert edges[("view:top_categories", "target:filesystem")]["state"] == "pending"  # not registered yet
    assert ("view:top_categories", "target:rest") not in edges  # a Delta view is not in the REST catalog
    # A caller who may read only one view sees only its part of the graph.
    alone = lineage(config, cards[1:], published)
    assert {n["id"] for n in alone["nodes"]} == {"view:top_categories", "target:filesystem"}


def test_console_states_cover_every_status_including_failed_with_its_error() -> None:
    assert console_state({"state": "FAILED", "error": "boom", "failed_epoch": 7}) == "failed"
    assert console_state({"state": "committed", "degraded_reason": "SOURCE_ERROR"}) == "failed"
    stopped = {"state": "committed", "degraded_reason": "STOPPED", "freshness_lag_ms": 9, "target_lag_ms": 1}
    assert console_state(stopped) == "stopped"  # stopped outranks late
    assert console_state({"state": "committed", "freshness_lag_ms": 9, "target_lag_ms": 1}) == "late"
    assert console_state({"state": "committed", "degraded_reason": "REGISTRAR_DOWN"}) == "degraded"
    assert console_state({"state": "committed", "freshness_lag_ms": 1, "target_lag_ms": 9}) == "fresh"
    assert console_state({"state": "created, no commit yet"}) == "pending"


def test_a_join_view_is_drawn_from_both_inputs_to_its_table(tmp_path: Path) -> None:
    config = project(tmp_path)
    text = explain_view(config, "by_category")  # a join: an operator graph
    graph = plan_graph(text, ["orders", "products"], "shop.by_category")
    ids = [n["id"] for n in graph["nodes"]]
    assert ids[:2] == ["in:orders", "in:products"] and ids[-1] == "out", ids
    joins = [n["id"] for n in graph["nodes"] if n["kind"] == "join"]
    assert joins and sum(1 for _, to in graph["edges"] if to == joins[0]) == 2, "both inputs reach the join"
    assert len(graph["edges"]) == len(ids) - 1, "a tree: every node but the table feeds one"
    assert graph["title"].startswith("view by_category (operator graph) -> shop.by_category"), graph["title"]
    assert "Join INNER" in text and any("__lv_state_by_category_g_log" in note for note in graph["notes"]), text
