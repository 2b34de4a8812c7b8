"""Config errors as a user sees them: file, key, bad value, what is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeview.errors import ConfigError
from lakeview.project import load_project

GOOD = """
[sources.orders]
format = "json"
path = "landing/orders"
schema = "order_id BIGINT, product_id BIGINT, quantity INT"

[views.sales]
sql = "SELECT product_id, SUM(quantity) AS total FROM orders GROUP BY product_id"
cadence = "5s"
namespace = "analytics"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lakeview.toml"
    path.write_text(text)
    return path


def error_for(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_project(path)
    message = str(info.value)
    assert message.startswith(str(path) + ": "), message
    return message


def test_valid_project_loads_with_defaults(tmp_path: Path) -> None:
    project = load_project(write(tmp_path, GOOD))
    assert project.server.host == "127.0.0.1"
    assert project.views["sales"].cadence.seconds == 5
    assert project.source_path("orders") == tmp_path / "landing" / "orders"
    assert project.catalog_store_url == f"sqlite:///{tmp_path / 'lake' / 'catalog.db'}"
    assert project.catalog_uri == "http://127.0.0.1:8181/iceberg"


def test_unknown_key_names_key_and_valid_keys(tmp_path: Path) -> None:
    message = error_for(tmp_path, GOOD + 'refresh = "5s"\n')
    assert "views.sales.refresh: unknown key in [views.sales]" in message
    assert "cadence" in message and "namespace" in message and "sql" in message


def test_unknown_top_level_section(tmp_path: Path) -> None:
    message = error_for(tmp_path, "[lakes]\nwarehouse = 'x'\n" + GOOD)
    assert "lakes: unknown key at the top level; valid keys: " in message
    valid = message.split("valid keys: ")[1].split(", ")
    assert {"lake", "server", "sources", "views"} <= set(valid) and valid == sorted(valid)


def test_bad_cadence_names_value_and_valid_forms(tmp_path: Path) -> None:
    message = error_for(tmp_path, GOOD.replace('cadence = "5s"', 'cadence = "5 parsecs"'))
    assert "views.sales.cadence" in message
    assert "'5 parsecs'" in message
    assert '"5s", "1m", "1h"' in message and "manual" in message


def test_manual_cadence_is_valid(tmp_path: Path) -> None:
    project = load_project(write(tmp_path, GOOD.replace('cadence = "5s"', 'cadence = "manual"')))
    assert project.views["sales"].cadence.is_manual


def test_sql_naming_unknown_source(tmp_path: Path) -> None:
    message = error_for(tmp_path, GOOD.replace("FROM orders", "FROM shipments"))
    assert "views.sales.sql" in message
    assert "'shipments', which is not a declared source (declared: orders)" in message


def test_missing_source_section(tmp_path: Path) -> None:
    text = GOOD.split("[views.sales]")[1]
    message = error_for(tmp_path, "[views.sales]" + text)
    assert "views.sales.sql" in message and "declared: none declared" in message


def test_unsupported_sql_is_named(tmp_path: Path) -> None:
    message = error_for(tmp_path, GOOD.replace("SUM(quantity)", "SUM(quantity * random())"))
    assert "views.sales.sql: RANDOM(): a non-deterministic function" in message


def test_bad_format_lists_valid_values(tmp_path: Path) -> None:
    message = error_for(tmp_path, GOOD.replace('format = "json"', 'format = "xml"'))
    assert "sources.orders.format" in message and "'xml'" in message
    assert "'json', 'csv', 'parquet' or 'ingest'" in message


def test_bad_schema(tmp_path: Path) -> None:
    message = error_for(tmp_path, GOOD.replace("quantity INT", "quantity WIDGET"))
    assert "sources.orders.schema" in message and "WIDGET" in message


def test_missing_required_key(tmp_path: Path) -> None:
    message = error_for(tmp_path, GOOD.replace('path = "landing/orders"\n', ""))
    assert "sources.orders.path: required key is missing" in message


def test_non_loopback_host_needs_auth(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[server]\nhost = "0.0.0.0"\n' + GOOD)
    assert "server.host" in message and 'requires [auth] mode = "oauth2"' in message


def test_invalid_toml(tmp_path: Path) -> None:
    message = error_for(tmp_path, "[views\n")
    assert "not valid TOML" in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found; create one with `lakeview init"):
        load_project(tmp_path / "nope.toml")


def test_bad_view_name(tmp_path: Path) -> None:
    message = error_for(tmp_path, GOOD.replace("[views.sales]", '[views."sales-by-product"]'))
    assert "views.sales-by-product" in message and "not a valid name" in message


def test_change_feeds_may_evolve_their_schema(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[sources.cdc]
format = "json"
path = "landing/cdc"
schema = "id BIGINT, op STRING, seq BIGINT"
new_columns = "evolve"
[sources.cdc.changes]
operation = "op"
key = ["id"]
sequence = "seq"

[sources.imgs]
format = "json"
path = "landing/imgs"
schema = "id BIGINT, amount INT"
new_columns = "evolve"
[sources.imgs.images]
key = ["id"]

[views.current]
sql = "SELECT * FROM cdc"
[views.current_images]
sql = "SELECT * FROM imgs"
""",
    )
    project = load_project(path)
    assert {s.new_columns.value for s in project.sources.values()} == {"evolve"}
    assert project.sources["cdc"].changes is not None and project.sources["imgs"].images is not None
