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
    assert "view sales (keyed_aggregate)" in out and "key: product_id" in out
    assert "filter WHERE quantity > 0: stateless" in out
    assert "MAX(quantity): greatest value with multiplicity > 0 in the value multiset [shop.__lv_state_sales_1]" in out
    assert "HAVING: re-evaluated per touched group" in out
    assert "shop.__lv_state_sales_src (current row per feed key)" in out
    assert "driver's key index up to 2000000 rows per table, past that read only by the Spark executors" in out
    (tmp_path / "lakeview.toml").write_text("[spark]\ndriver_keys_max = 0\n" + PROJECT)
    bounded = CliRunner().invoke(app, ["explain", "sales", "-p", str(tmp_path)]).output
    assert "driver's key index up to 0 rows per table" in bounded
    copy = CliRunner().invoke(app, ["explain", "orders_copy", "-p", str(tmp_path)]).output
    assert "upsert/delete by the feed key (order_id)" in copy and "key: order_id" in copy


def test_projection_over_a_change_feed_must_keep_the_key(tmp_path: Path) -> None:
    (tmp_path / "lakeview.toml").write_text(
        PROJECT.replace("SELECT order_id, quantity FROM changes", "SELECT quantity FROM changes")
    )
    result = CliRunner().invoke(app, ["explain", "sales", "-p", str(tmp_path)])
    assert result.exit_code != 0
    assert "views.orders_copy.sql" in str(result.exception) and "must select its key column(s) order_id" in str(
        result.exception
    )


def test_min_max_over_append_only_input_keep_each_groups_extremes(tmp_path: Path) -> None:
    """Over an append-only source a value multiset read only by MIN/MAX keeps each group's lowest and
    highest value; one a COUNT(DISTINCT) reads keeps every value; over a change feed every value is kept."""
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
    extremes = "only each group's lowest and highest value: append-only input, read by MIN/MAX only"
    assert f"shop.__lv_state_stats_1 (value multiset of order_id: key, __lv_v, __lv_n; {extremes})" in out
    assert "shop.__lv_state_stats_2 (value multiset of quantity: key, __lv_v, __lv_n)" in out
    (tmp_path / "lakeview.toml").write_text(PROJECT)
    assert "lowest and highest" not in CliRunner().invoke(app, ["explain", "sales", "-p", str(tmp_path)]).output
