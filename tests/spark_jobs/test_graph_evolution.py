"""A view kept as an operator graph over a source with ``new_columns = "evolve"``, through real Spark: while a
``SELECT *`` view of the same source gains the input's new column, the graph view (naming its columns) keeps
its columns and its rows equal the recompute of its SQL after every epoch; it reads the source's declared
columns, so a value that does not fit the new column's recorded type sets the row aside only in the views
that read that column."""

from __future__ import annotations

import json

from catalog_api.server import CatalogServer
from lakeview.config.evolution import added_columns
from lakeview.project import is_graph_view
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_evolution import assert_running_views_recomputed
from tests.spark_jobs.test_pipeline import read_view, start


def test_a_graph_view_naming_its_columns_keeps_them_while_the_source_evolves(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    source = f"gev_{unique_name}"[:40]
    star, top = f"{source}_all", f"{source}_top"
    project = make_project(
        sources={
            source: {
                "format": "json",
                "path": f"landing/{source}",
                "schema": "id BIGINT, amount BIGINT",
                "new_columns": "evolve",
            }
        },
        views={
            star: {"sql": f"SELECT * FROM {source}", "cadence": "200ms", "namespace": "evolution_tests"},
            top: {
                "sql": f"SELECT id, amount FROM {source} ORDER BY amount DESC LIMIT 3",
                "cadence": "200ms",
                "namespace": "evolution_tests",
            },
        },
    )
    assert is_graph_view(project, top) and not is_graph_view(project, star)
    landing = project.source_path(source)
    epochs = [
        [{"id": 1, "amount": 5}, {"id": 2, "amount": 1}],
        [{"id": 3, "amount": 7, "channel": "web"}, {"id": 4, "amount": 2, "items": 3}],
        [{"id": 5, "amount": 9, "channel": "store"}, {"id": 6, "amount": 8, "items": "lots"}],
    ]
    running = {v: start(spark, project, v, catalog_server) for v in (star, top)}
    try:
        for number, rows in enumerate(epochs):
            land(landing, f"{number:03d}.json", [json.dumps(r) for r in rows])
            assert_running_views_recomputed(running, project, landing, catalog_server, number)
    finally:
        for _, query in running.values():
            query.stop()
    assert {c["name"] for c in added_columns(project, source)} == {"channel", "items"}
    assert read_view(catalog_server, "evolution_tests", star).column_names == ["id", "amount", "channel", "items"]
    graph = read_view(catalog_server, "evolution_tests", top)
    assert graph.column_names == ["id", "amount"]
    assert sorted(graph.to_pylist(), key=lambda r: -r["amount"]) == [
        {"id": 5, "amount": 9},
        {"id": 6, "amount": 8},  # "items": "lots" does not fit bigint: set aside by the SELECT * view only
        {"id": 3, "amount": 7},
    ]
    assert 6 not in {r["id"] for r in read_view(catalog_server, "evolution_tests", star).to_pylist()}
