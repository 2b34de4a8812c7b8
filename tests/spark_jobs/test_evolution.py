"""Source schema evolution through real Spark: with ``new_columns = "evolve"`` a column that
appears in the input is added to the source's schema and to ``SELECT *`` views (Iceberg and
Delta), earlier rows read NULL for it, the batch that brought it keeps its values, a restart
reads with the evolved schema, and ``lakeview verify``'s recompute agrees; with the default
``"ignore"`` the column is dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog_api.server import CatalogServer
from lakeview import oracle
from lakeview.duck import connect
from lakeview.errors import ConfigError
from lakeview.evolution import added_columns
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_pipeline import read_view, start

SCHEMA = "id BIGINT, amount BIGINT"


def lines(*rows: dict) -> list[str]:
    return [json.dumps(r) for r in rows]


def read_delta(path: str):
    con = connect("delta")
    try:
        return con.sql(f"SELECT * FROM delta_scan('{path}')").to_arrow_table()
    finally:
        con.close()


def assert_equal(project, view: str, snapshot, landing: Path) -> None:
    comparison = oracle.compare(snapshot, oracle.recompute(project, view, oracle.landed_files(landing)))
    assert comparison.equal, comparison.describe()


def test_new_input_columns_evolve_star_views_in_both_formats(spark, catalog_server: CatalogServer, make_project, unique_name: str) -> None:
    source = f"ev_{unique_name}"[:50]
    ice, delta = f"{source}_ice", f"{source}_dl"
    sql = f"SELECT * FROM {source} WHERE amount > 0"
    project = make_project(
        sources={source: {"format": "json", "path": f"landing/{source}", "schema": SCHEMA, "new_columns": "evolve"}},
        views={
            ice: {"sql": sql, "cadence": "1s", "namespace": "evolution_tests"},
            delta: {"sql": sql, "cadence": "1s", "namespace": "evolution_tests", "format": "delta"},
        },
    )
    landing = project.source_path(source)
    land(landing, "a.json", lines({"id": 1, "amount": 5}, {"id": 2, "amount": -1}))
    running = {v: start(spark, project, v, catalog_server) for v in project.views}

    def catch_up() -> None:
        for _, query in running.values():
            query.processAllAvailable()

    def check() -> None:
        assert_equal(project, ice, read_view(catalog_server, "evolution_tests", ice), landing)
        assert_equal(project, delta, read_delta(str(project.table_location(delta))), landing)

    try:
        catch_up()
        assert read_view(catalog_server, "evolution_tests", ice).column_names == ["id", "amount"]
        land(landing, "b.json", lines({"id": 3, "amount": 7, "channel": "web"}, {"id": 4, "amount": 2, "channel": "app", "items": 3}))
        catch_up()
        view = read_view(catalog_server, "evolution_tests", ice)
        assert view.column_names == ["id", "amount", "channel", "items"]
        rows = {r["id"]: r for r in view.to_pylist()}
        assert rows[1]["channel"] is None, "rows committed before the column appeared read NULL"
        assert (rows[3]["channel"], rows[4]["channel"], rows[4]["items"]) == ("web", "app", 3), "the batch that brought it keeps its values"
        assert {r["id"]: r["channel"] for r in read_delta(str(project.table_location(delta))).to_pylist()} == {1: None, 3: "web", 4: "app"}
        check()
    finally:
        for _, query in running.values():
            query.stop()
    recorded = {c["name"]: c["type"] for c in added_columns(project, source)}
    assert recorded == {"channel": "string", "items": "bigint"}

    # A restart reads with the evolved schema from the start (the Delta view catches up later).
    running = {ice: start(spark, project, ice, catalog_server)}
    try:
        land(landing, "c.json", lines({"id": 5, "amount": 9, "channel": "store"}, {"id": 6, "amount": 1, "items": "lots"}))
        catch_up()
        rows = {r["id"]: r for r in read_view(catalog_server, "evolution_tests", ice).to_pylist()}
        assert rows[5]["channel"] == "store"
        assert 6 not in rows, "a value that does not fit the recorded type is a malformed row"
        assert_equal(project, ice, read_view(catalog_server, "evolution_tests", ice), landing)
    finally:
        for _, query in running.values():
            query.stop()


def test_new_columns_are_ignored_by_default(spark, catalog_server: CatalogServer, make_project, unique_name: str) -> None:
    source = f"ig_{unique_name}"[:50]
    project = make_project(
        sources={source: {"format": "json", "path": f"landing/{source}", "schema": SCHEMA}},
        views={unique_name: {"sql": f"SELECT * FROM {source}", "cadence": "1s", "namespace": "evolution_tests"}},
    )
    landing = project.source_path(source)
    _, query = start(spark, project, unique_name, catalog_server)
    try:
        land(landing, "a.json", lines({"id": 1, "amount": 5, "channel": "web"}))
        query.processAllAvailable()
    finally:
        query.stop()
    assert read_view(catalog_server, "evolution_tests", unique_name).to_pylist() == [{"id": 1, "amount": 5}]
    assert added_columns(project, source) == []


def test_evolve_is_refused_for_change_feeds(make_project) -> None:
    feed = {"operation": "op", "key": ["id"], "sequence": "id"}
    with pytest.raises(ConfigError, match="new_columns = 'evolve' is offered for append-only sources"):
        make_project(sources={"feed": {"format": "json", "path": "landing/feed", "schema": SCHEMA + ", op STRING",
                                       "changes": feed, "new_columns": "evolve"}},
                     views={"v": {"sql": "SELECT * FROM feed"}})
