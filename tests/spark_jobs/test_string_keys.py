"""The same ``GROUP BY k`` view over a STRING key, once as Iceberg and once as Delta, kept by the
real Spark pipeline over JSON landing files: every epoch after the first updates stored groups
(the Delta writer's lookup reads the files its MERGE wrote, strings as string_view, with no null
key: the files' statistics then bind `k >= "a"` to string_view and pyarrow had no kernel), and both
tables equal the recompute, read back by DuckDB too."""

from __future__ import annotations

from catalog_api.ops import view_tables as tables
from lakeview.cli.generator import land_json
from lakeview.ivm import oracle
from tests.duck_readers import catalog_reader, delta_reader
from tests.pipelines import view_pipeline

SCHEMA = "k STRING, v BIGINT"
SQL = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM events GROUP BY k"
BATCHES = [
    [{"k": "a", "v": 1}, {"k": "", "v": 2}, {"k": "é日本", "v": 3}],
    [{"k": "a", "v": 10}, {"k": "é日本", "v": 20}, {"k": "b", "v": 5}],
    [{"k": "", "v": 7}, {"k": "b", "v": -5}, {"k": "c", "v": 0}],
]


def test_a_string_keyed_view_is_right_in_iceberg_and_delta(
    spark, catalog_server, make_project, unique_name: str
) -> None:
    views = {
        f"{unique_name[:40]}_{fmt}": {"sql": SQL, "format": fmt, "cadence": "200ms", "namespace": "string_keys"}
        for fmt in ("iceberg", "delta")
    }
    project = make_project(views=views, sources={"events": {"format": "json", "path": "", "schema": SCHEMA}})
    project = make_project(
        views=views, sources={"events": {"format": "json", "path": str(project.root / "landing"), "schema": SCHEMA}}
    )
    landing = project.source_path("events")
    queries = []
    for view in views:
        pipeline = view_pipeline(spark, project, view, catalog_server.uri)
        pipeline.prepare()
        queries.append(pipeline.start())
    try:
        for i, rows in enumerate(BATCHES):
            land_json(landing, f"{i}.json", rows)
            for query in queries:
                query.processAllAvailable()
                assert query.exception() is None
    finally:
        for query in queries:
            query.stop()

    expected = oracle.recompute(project, next(iter(views)), oracle.landed_files(landing))
    assert sorted(expected.to_pylist(), key=repr) == sorted(
        [
            {"k": "a", "n": 2, "total": 11},
            {"k": "", "n": 2, "total": 9},
            {"k": "é日本", "n": 2, "total": 23},
            {"k": "b", "n": 2, "total": 0},
            {"k": "c", "n": 1, "total": 0},
        ],
        key=repr,
    )
    for view in views:
        comparison = oracle.compare(tables.read_rows(project, view), expected)
        assert comparison.equal, f"{view}: {comparison.describe()}"
        assert [c.epoch for c in tables.commit_history(project, view)][0] == 2, "one commit per landed file"
    iceberg_view, delta_view = views
    duck = (
        catalog_reader(catalog_server.uri, "lakeview")
        .sql(f"SELECT k, n, total FROM lake.string_keys.{iceberg_view}")
        .fetchall()
    )
    delta = delta_reader().sql(f"SELECT k, n, total FROM delta_scan('{project.table_location(delta_view)}')").fetchall()
    assert (
        sorted(duck, key=repr)
        == sorted(delta, key=repr)
        == sorted((tuple(r.values()) for r in expected.to_pylist()), key=repr)
    )
