"""The shipped example project must stay valid as the config model evolves."""

from pathlib import Path

from lakeview.project import load_project

ROOT = Path(__file__).resolve().parents[1]


def test_orders_example_is_a_valid_project() -> None:
    project = load_project(ROOT / "examples" / "orders")
    assert {v: p.cadence.text for v, p in project.views.items()} == {
        "sales_by_product": "5s",
        "large_orders": "1m",
        "product_extremes": "manual",
    }
