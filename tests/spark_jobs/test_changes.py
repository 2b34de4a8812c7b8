"""Change feeds through real Spark: inserts, updates and deletes (and malformed rows) land as
files; the view read back through DuckDB equals the full recompute after every epoch, groups
whose rows are all deleted disappear, and bad rows sit in the quarantine with their reason."""

from __future__ import annotations

import json
import os
from pathlib import Path

from catalog_api.ops.status import view_statuses
from catalog_api.server import CatalogServer
from lakeview.ivm import oracle
from spark_jobs.sources.quarantine import quarantined_rows
from tests.spark_jobs.test_pipeline import read_view, start

SCHEMA = "order_id BIGINT, product_id BIGINT, quantity INT, op STRING, seq BIGINT"
FEED = {"operation": "op", "key": ["order_id"], "sequence": "seq", "insert": ["c"], "update": ["u"], "delete": ["d"]}
AGG_SQL = """
SELECT product_id,
       SUM(quantity) AS total, COUNT(*) AS n, AVG(quantity) AS avg_q,
       MIN(quantity) AS lo, MAX(quantity) AS hi, COUNT(DISTINCT quantity) AS sizes
FROM changes
GROUP BY product_id
HAVING COUNT(*) >= 2
"""
seq = iter(range(1, 10_000))


def change(op: str, order_id: int, product_id: int | None = None, quantity: int | None = None) -> str:
    return json.dumps(
        {"order_id": order_id, "product_id": product_id, "quantity": quantity, "op": op, "seq": next(seq)}
    )


def land(directory: Path, name: str, lines: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    hidden = directory / f".{name}"
    hidden.write_text("\n".join(lines) + "\n")
    os.replace(hidden, directory / name)


EPOCHS = [
    [change("c", i, i % 3, i) for i in range(1, 10)],
    [
        change("u", 1, 1, 50),  # moves order 1 from product 1 to 1 with a new quantity
        change("u", 2, 0, 2),  # moves order 2 from product 2 to product 0
        change("d", 4),  # delete by key only
        change("u", 5, 2, 7),
        change("u", 5, 2, 8),  # two changes of one key in one batch: the newer wins
        "{not json",  # malformed
        '{"order_id": "seven", "product_id": 1, "quantity": 1, "op": "u", "seq": 99}',  # wrong type
        change("x", 3, 0, 3),  # unknown operation
        json.dumps({"product_id": 1, "quantity": 1, "op": "c", "seq": 100}),  # missing required key
    ],
    [change("d", i) for i in (3, 6, 9)] + [change("c", 10, 1, 1)],  # product 0 loses every row
]


def test_change_feed_aggregate_equals_recompute_every_epoch(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    sources = {
        "changes": {
            "format": "json",
            "path": "landing/changes",
            "schema": SCHEMA,
            "changes": FEED,
            "required": ["order_id"],
        }
    }
    project = make_project(
        views={unique_name: {"sql": AGG_SQL, "cadence": "200ms", "namespace": "cdc_tests"}}, sources=sources
    )
    landing = project.source_path("changes")
    pipeline, query = start(spark, project, unique_name, catalog_server)
    try:
        for number, lines in enumerate(EPOCHS):
            land(landing, f"{number:03d}.json", lines)
            query.processAllAvailable()
            files = oracle.landed_files(landing)
            comparison = oracle.compare(
                read_view(catalog_server, "cdc_tests", unique_name), oracle.recompute(project, unique_name, files)
            )
            assert comparison.equal, f"after epoch {number}: {comparison.describe()}"
    finally:
        query.stop()
    view = {r["product_id"]: r for r in read_view(catalog_server, "cdc_tests", unique_name).to_pylist()}
    assert 0 not in view, "a group whose rows were all deleted leaves the view"
    assert view[2]["hi"] == 8 and view[2]["total"] == 8 + 8  # orders 5 (updated twice: 8) and 8
    reasons = sorted(r["reason"] for r in quarantined_rows(project, "changes", unique_name))
    assert reasons == [
        "malformed row: does not parse into the schema",
        "malformed row: does not parse into the schema",
        "missing required column order_id",
        "unknown operation x",
    ]
    assert all(r["file"].endswith("001.json") for r in quarantined_rows(project, "changes"))
    status = {s.view: s for s in view_statuses(project)}[unique_name]
    assert status.rows_quarantined == 4
    # every operator's state in the view's one log table (Iceberg), the feed's current rows in its mirror
    assert {t.table_name for t in pipeline.tables()} == {
        unique_name,
        f"__lv_state_{unique_name}_g_log",
        f"__lv_state_{unique_name}_src_changes",
    }


def test_projection_over_a_change_feed_is_keyed_by_the_feed_key(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    sources = {"changes": {"format": "json", "path": "landing/changes", "schema": SCHEMA, "changes": FEED}}
    sql = "SELECT order_id, product_id, quantity * 10 AS big FROM changes WHERE quantity > 2"
    project = make_project(
        views={unique_name: {"sql": sql, "cadence": "200ms", "namespace": "cdc_tests"}}, sources=sources
    )
    landing = project.source_path("changes")
    _, query = start(spark, project, unique_name, catalog_server)
    try:
        for number, lines in enumerate(EPOCHS):
            land(landing, f"{number:03d}.json", lines)
            query.processAllAvailable()
        files = oracle.landed_files(landing)
        comparison = oracle.compare(
            read_view(catalog_server, "cdc_tests", unique_name), oracle.recompute(project, unique_name, files)
        )
        assert comparison.equal, comparison.describe()
    finally:
        query.stop()


def test_csv_rows_that_do_not_fit_are_quarantined(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    sources = {
        "sales": {
            "format": "csv",
            "path": "landing/sales",
            "schema": "product_id BIGINT, quantity INT",
            "required": ["product_id"],
        }
    }
    sql = "SELECT product_id, SUM(quantity) AS total FROM sales GROUP BY product_id"
    project = make_project(
        views={unique_name: {"sql": sql, "cadence": "200ms", "namespace": "cdc_tests"}}, sources=sources
    )
    landing = project.source_path("sales")
    _, query = start(spark, project, unique_name, catalog_server)
    try:
        land(landing, "a.csv", ["product_id,quantity", "1,5", "2,seven", "1,2", ",4", "3,1"])
        query.processAllAvailable()
    finally:
        query.stop()
    assert {r["product_id"]: r["total"] for r in read_view(catalog_server, "cdc_tests", unique_name).to_pylist()} == {
        1: 7,
        3: 1,
    }
    reasons = sorted(r["reason"] for r in quarantined_rows(project, "sales", unique_name))
    assert reasons == ["malformed row: does not parse into the schema", "missing required column product_id"]
    assert [r["record"] for r in quarantined_rows(project, "sales") if r["reason"].startswith("malformed")] == [
        "2,seven"
    ]


def image(before: dict | None, after: dict | None) -> str:
    return json.dumps({"before": before, "after": after})


def test_before_after_image_feed_equals_recompute(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    """A before/after-image feed needs no mirror: the images are the weights (before −1, after +1)."""
    row_schema = "order_id BIGINT, product_id BIGINT, quantity INT"
    sources = {
        "images": {"format": "json", "path": "landing/images", "schema": row_schema, "images": {"key": ["order_id"]}}
    }
    views = {
        f"{unique_name}_agg": {
            "sql": "SELECT product_id, SUM(quantity) AS total, MAX(quantity) AS hi FROM images GROUP BY product_id",
            "cadence": "200ms",
            "namespace": "cdc_tests",
        },
    }
    project = make_project(views=views, sources=sources)
    landing = project.source_path("images")
    view = f"{unique_name}_agg"

    def o(i: int, p: int, q: int) -> dict:
        return {"order_id": i, "product_id": p, "quantity": q}

    batches = [
        [image(None, o(1, 1, 5)), image(None, o(2, 1, 9)), image(None, o(3, 2, 4))],
        [image(o(2, 1, 9), o(2, 1, 1)), image(o(3, 2, 4), None), "garbage", image(None, o(4, 3, 7))],
    ]
    pipeline, query = start(spark, project, view, catalog_server)
    try:
        for number, lines in enumerate(batches):
            land(landing, f"{number:03d}.json", lines)
            query.processAllAvailable()
            comparison = oracle.compare(
                read_view(catalog_server, "cdc_tests", view),
                oracle.recompute(project, view, oracle.landed_files(landing)),
            )
            assert comparison.equal, f"after epoch {number}: {comparison.describe()}"
    finally:
        query.stop()
    rows = {r["product_id"]: (r["total"], r["hi"]) for r in read_view(catalog_server, "cdc_tests", view).to_pylist()}
    assert rows == {1: (6, 5), 3: (7, 7)}  # product 2's only order was deleted; the MAX of product 1 fell back to 5
    assert pipeline.mirrors == {}  # the images carry the old rows: no mirror of the feed
    assert len(quarantined_rows(project, "images", view)) == 1
