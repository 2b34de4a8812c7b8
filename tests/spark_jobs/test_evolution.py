"""Source schema evolution through real Spark: with ``new_columns = "evolve"`` a column that
appears in the input is added to the source's schema and to ``SELECT *`` views (Iceberg and
Delta), earlier rows read NULL for it, the batch that brought it keeps its values, a restart
reads with the evolved schema, and ``lakeview verify``'s recompute agrees; with the default
``"ignore"`` the column is dropped. Change feeds (an operation column, or before/after images)
evolve the same way, and their updates and deletes keep applying after the column appeared."""

from __future__ import annotations

import json
from pathlib import Path

from catalog_api.server import CatalogServer
from lakeview.config.evolution import added_columns
from lakeview.ivm import oracle
from lakeview.sql.duck import connect
from tests.pipelines import started
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_pipeline import read_view

SCHEMA = "id BIGINT, amount BIGINT"


def start(spark, project, view: str, catalog_server: CatalogServer):
    """``view``'s pipeline as the embedded stack builds it (a Delta graph view's state writers too), started."""
    return started(spark, project, view, catalog_server.uri)


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


def test_new_input_columns_evolve_star_views_in_both_formats(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    source = f"ev_{unique_name}"[:50]
    ice, delta = f"{source}_ice", f"{source}_dl"
    sql = f"SELECT * FROM {source} WHERE amount > 0"
    project = make_project(
        sources={source: {"format": "json", "path": f"landing/{source}", "schema": SCHEMA, "new_columns": "evolve"}},
        views={
            ice: {"sql": sql, "cadence": "200ms", "namespace": "evolution_tests"},
            delta: {"sql": sql, "cadence": "200ms", "namespace": "evolution_tests", "format": "delta"},
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
        land(
            landing,
            "b.json",
            lines({"id": 3, "amount": 7, "channel": "web"}, {"id": 4, "amount": 2, "channel": "app", "items": 3}),
        )
        catch_up()
        view = read_view(catalog_server, "evolution_tests", ice)
        assert view.column_names == ["id", "amount", "channel", "items"]
        rows = {r["id"]: r for r in view.to_pylist()}
        assert rows[1]["channel"] is None, "rows committed before the column appeared read NULL"
        assert (rows[3]["channel"], rows[4]["channel"], rows[4]["items"]) == ("web", "app", 3), (
            "the batch that brought it keeps its values"
        )
        assert {r["id"]: r["channel"] for r in read_delta(str(project.table_location(delta))).to_pylist()} == {
            1: None,
            3: "web",
            4: "app",
        }
        check()
    finally:
        for _, query in running.values():
            query.stop()
    recorded = {c["name"]: c["type"] for c in added_columns(project, source)}
    assert recorded == {"channel": "string", "items": "bigint"}

    # A restart reads with the evolved schema from the start (the Delta view catches up later).
    running = {ice: start(spark, project, ice, catalog_server)}
    try:
        land(
            landing,
            "c.json",
            lines({"id": 5, "amount": 9, "channel": "store"}, {"id": 6, "amount": 1, "items": "lots"}),
        )
        catch_up()
        rows = {r["id"]: r for r in read_view(catalog_server, "evolution_tests", ice).to_pylist()}
        assert rows[5]["channel"] == "store"
        assert 6 not in rows, "a value that does not fit the recorded type is a malformed row"
        assert_equal(project, ice, read_view(catalog_server, "evolution_tests", ice), landing)
    finally:
        for _, query in running.values():
            query.stop()


def test_new_columns_are_ignored_by_default(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    source = f"ig_{unique_name}"[:50]
    project = make_project(
        sources={source: {"format": "json", "path": f"landing/{source}", "schema": SCHEMA}},
        views={unique_name: {"sql": f"SELECT * FROM {source}", "cadence": "200ms", "namespace": "evolution_tests"}},
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


FEED_SCHEMA = "order_id BIGINT, product_id BIGINT, quantity INT, op STRING, seq BIGINT"
FEED = {"operation": "op", "key": ["order_id"], "sequence": "seq", "insert": ["c"], "update": ["u"], "delete": ["d"]}
AGG_SQL = (
    "SELECT product_id, SUM(quantity) AS total, COUNT(*) AS n, MAX(quantity) AS hi FROM {source} GROUP BY product_id"
)


def feed_views(source: str) -> dict[str, dict]:
    """A ``SELECT *`` projection (keyed by the feed key) and an aggregate over ``source``."""
    return {
        f"{source}_all": {"sql": f"SELECT * FROM {source}", "cadence": "200ms", "namespace": "evolution_tests"},
        f"{source}_agg": {"sql": AGG_SQL.format(source=source), "cadence": "200ms", "namespace": "evolution_tests"},
    }


def run_epochs(
    spark, catalog_server: CatalogServer, project, source: str, epochs: list[list[str]], restart_before: int
) -> None:
    """Land each epoch's file, let every view catch up and check it against the recompute;
    the queries are restarted before epoch ``restart_before`` (they then read the evolved schema)."""
    landing = project.source_path(source)
    running: dict = {}
    try:
        for number, batch in enumerate(epochs):
            if number == restart_before:
                for _, query in running.values():
                    query.stop()
                running = {}
            running = running or {v: start(spark, project, v, catalog_server) for v in project.views}
            land(landing, f"{number:03d}.json", batch)
            assert_running_views_recomputed(running, project, landing, catalog_server, number)
    finally:
        for _, query in running.values():
            query.stop()


def test_change_feed_evolves_with_updates_and_deletes_after(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    source = f"cf_{unique_name}"[:40]
    project = make_project(
        sources={
            source: {
                "format": "json",
                "path": f"landing/{source}",
                "schema": FEED_SCHEMA,
                "changes": FEED,
                "new_columns": "evolve",
            }
        },
        views=feed_views(source),
    )
    seq = iter(range(1, 1000))

    def change(
        op: str, order_id: int, product_id: int | None = None, quantity: int | None = None, **extra: object
    ) -> str:
        row = {"order_id": order_id, "product_id": product_id, "quantity": quantity, "op": op, "seq": next(seq)}
        return json.dumps({**row, **extra})

    epochs = [
        [change("c", 1, 1, 5), change("c", 2, 1, 9), change("c", 3, 2, 4), change("c", 6, 2, 1)],
        # the column appears: an insert with it and an update of a row written before it existed
        [change("c", 4, 3, 7, channel="web"), change("u", 1, 1, 6, channel="app")],
        # after it: updates and deletes of rows written before and after it appeared
        [
            change("u", 4, 3, 8, channel="store"),
            change("d", 2),
            change("d", 1),
            change("u", 3, 2, 2),
            change("c", 5, 3, 1, channel="web"),
        ],
        # after a restart (the stream reads the evolved schema): more of both
        [change("u", 5, 2, 3, channel="app"), change("d", 4), change("u", 6, 2, 2, channel="web")],
    ]
    run_epochs(spark, catalog_server, project, source, epochs, restart_before=3)
    assert [c["name"] for c in added_columns(project, source)] == ["channel"]
    view = read_view(catalog_server, "evolution_tests", f"{source}_all")
    assert view.column_names == ["order_id", "product_id", "quantity", "op", "seq", "channel"]
    rows = {r["order_id"]: (r["quantity"], r["channel"]) for r in view.to_pylist()}
    assert rows == {3: (2, None), 5: (3, "app"), 6: (2, "web")}, (
        "order 3 was written and updated without the column: NULL"
    )
    totals = {
        r["product_id"]: (r["total"], r["n"])
        for r in read_view(catalog_server, "evolution_tests", f"{source}_agg").to_pylist()
    }
    assert totals == {2: (7, 3)}


def test_images_feed_evolves_with_updates_and_deletes_after(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    source = f"im_{unique_name}"[:40]
    project = make_project(
        sources={
            source: {
                "format": "json",
                "path": f"landing/{source}",
                "schema": "order_id BIGINT, product_id BIGINT, quantity INT",
                "images": {"key": ["order_id"]},
                "new_columns": "evolve",
            }
        },
        views=feed_views(source),
    )

    def o(i: int, p: int, q: int, **extra: object) -> dict:
        return {"order_id": i, "product_id": p, "quantity": q, **extra}

    def image(before: dict | None, after: dict | None, **outside: object) -> str:
        return json.dumps({"before": before, "after": after, **outside})

    epochs = [
        [image(None, o(1, 1, 5)), image(None, o(2, 1, 9)), image(None, o(3, 2, 4)), image(None, o(6, 2, 1))],
        # the column appears in after images (a key outside the images is no row column)
        [image(None, o(4, 3, 7, channel="web"), ts_ms=1), image(o(1, 1, 5), o(1, 1, 6, channel="app"))],
        # in both images now: updates and deletes of rows written before and after it appeared
        [
            image(o(4, 3, 7, channel="web"), o(4, 3, 8, channel="store")),
            image(o(2, 1, 9), None),
            image(o(1, 1, 6, channel="app"), None),
            image(o(3, 2, 4), o(3, 2, 2)),
            image(None, o(5, 3, 1, channel="web")),
        ],
        [
            image(o(5, 3, 1, channel="web"), o(5, 2, 3, channel="app")),
            image(o(4, 3, 8, channel="store"), None),
            image(o(6, 2, 1), o(6, 2, 2, channel="web")),
        ],
    ]
    run_epochs(spark, catalog_server, project, source, epochs, restart_before=3)
    assert [c["name"] for c in added_columns(project, source)] == ["channel"], "ts_ms is outside the images"
    view = read_view(catalog_server, "evolution_tests", f"{source}_all")
    assert view.column_names == ["order_id", "product_id", "quantity", "channel"]
    rows = {r["order_id"]: (r["quantity"], r["channel"]) for r in view.to_pylist()}
    assert rows == {3: (2, None), 5: (3, "app"), 6: (2, "web")}
    totals = {
        r["product_id"]: (r["total"], r["n"])
        for r in read_view(catalog_server, "evolution_tests", f"{source}_agg").to_pylist()
    }
    assert totals == {2: (7, 3)}


def assert_running_views_recomputed(running: dict, project, landing, catalog_server, number: int) -> None:
    """Each running view's query takes what landed, and the view read through the catalog (a Delta view: its
    table read by DuckDB) equals its recompute over every landed file."""
    for view, (_, query) in running.items():
        query.processAllAvailable()
        delta = project.views[view].format.value == "delta"  # a Delta table: read by DuckDB's delta_scan
        table = (
            read_delta(str(project.table_location(view)))
            if delta
            else read_view(catalog_server, "evolution_tests", view)
        )
        comparison = oracle.compare(table, oracle.recompute(project, view, oracle.landed_files(landing)))
        assert comparison.equal, f"{view} after epoch {number}: {comparison.describe()}"
