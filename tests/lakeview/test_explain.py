"""`lakeview explain VIEW` as a user runs it: operators, maintenance, key and state."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from lakeview.cli.main import app

PROJECT = """
[sources.changes]
format = "json"
path = "landing"
schema = "order_id BIGINT, product_id BIGINT, quantity INT, op STRING, seq BIGINT"
required = ["order_id"]
changes = { operation = "op", key = ["order_id"], sequence = "seq" }

[views.sales]
sql = '''
SELECT product_id, SUM(quantity) AS total, MAX(quantity) AS biggest
FROM changes WHERE quantity > 0
GROUP BY product_id HAVING COUNT(*) > 1
'''
namespace = "shop"

[views.orders_copy]
sql = "SELECT order_id, quantity FROM changes"
"""


def test_explain_names_operators_key_and_state(tmp_path: Path) -> None:
    (tmp_path / "lakeview.toml").write_text(PROJECT)
    result = CliRunner().invoke(app, ["explain", "sales", "-p", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "view sales (operator graph) -> shop.sales" in out and "the view's table is keyed by product_id" in out
    assert 'Filter ("changes_quantity_2" > 0)' in out  # WHERE quantity > 0, stateless
    assert "Aggregate GROUP BY (g_product_id) SUM(" in out and "MAX(" in out
    assert 'each group\'s distinct values of "changes_quantity_2" with their counts (for MAX(' in out
    assert "aggregate5.values0 -> shop.__lv_state_sales_g_log" in out  # the MAX's value multiset, in the view's log
    assert 'Filter "count" > 1' in out  # HAVING COUNT(*) > 1: re-evaluated per changed group
    assert "changes (the change feed's current row per key order_id) -> shop.__lv_state_sales_src_changes" in out
    assert "held in the driver's memory up to 2000000 live rows per table, past that looked up by key" in out
    (tmp_path / "lakeview.toml").write_text("[spark]\ndriver_keys_max = 0\n" + PROJECT)
    bounded = CliRunner().invoke(app, ["explain", "sales", "-p", str(tmp_path)]).output
    assert "held in the driver's memory up to 0 live rows per table" in bounded
    copy = CliRunner().invoke(app, ["explain", "orders_copy", "-p", str(tmp_path)]).output
    assert "the view's table is keyed by order_id" in copy and "__lv_state_orders_copy_src_changes (the mirror)" in copy


def test_projection_over_a_change_feed_without_its_key_is_a_multiset(tmp_path: Path) -> None:
    """A projection dropping the feed's key keeps its rows as a multiset (rows may repeat and be retracted):
    it loads, and explain says so (the one-source stack refused it)."""
    (tmp_path / "lakeview.toml").write_text(
        PROJECT.replace("SELECT order_id, quantity FROM changes", "SELECT quantity FROM changes")
    )
    result = CliRunner().invoke(app, ["explain", "orders_copy", "-p", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "the view's table is a multiset keyed by the whole row" in result.output


def test_min_max_over_append_only_input_keep_each_groups_extremes(tmp_path: Path) -> None:
    """Over an append-only source MIN/MAX keep each group's extreme so far in the group's record; a
    COUNT(DISTINCT) keeps every value; over a change feed MIN/MAX keep every value too."""
    project = """
[sources.orders]
format = "parquet"
path = "landing"
schema = "order_id BIGINT, product_id BIGINT, quantity INT"

[views.stats]
sql = "SELECT product_id, AVG(quantity) AS q, MIN(order_id) AS first, COUNT(DISTINCT quantity) AS sizes FROM orders GROUP BY product_id"
namespace = "shop"
"""
    (tmp_path / "lakeview.toml").write_text(project)
    out = CliRunner().invoke(app, ["explain", "stats", "-p", str(tmp_path)]).output
    assert "one record per group: row count, sums and non-NULL counts, MIN/MAX so far (the input never retracts)" in out
    assert 'distinct values of "orders_quantity_2" with their counts (for COUNT(DISTINCT' in out
    assert 'distinct values of "orders_order_id_2"' not in out  # MIN(order_id): no value multiset
    (tmp_path / "lakeview.toml").write_text(PROJECT)
    over_feed = CliRunner().invoke(app, ["explain", "sales", "-p", str(tmp_path)]).output
    assert "MIN/MAX so far" not in over_feed and "(for MAX(" in over_feed
