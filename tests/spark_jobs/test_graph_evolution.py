"""A view kept as an operator graph over a source with ``new_columns = "evolve"``, through real Spark: while a
``SELECT *`` view of the same source gains the input's new columns, a graph view naming its columns keeps its
columns, and graph views whose ``*`` flows through UNION ALL or a LEFT JOIN's side (its state) gain them, on
Iceberg and Delta (rows committed before read NULL for them); every view's rows equal DuckDB's recompute of its
SQL after every epoch, the join views' across a restart too (dimension rows then join left rows stored before
and after the columns appeared). A view over the evolving UNION ALL view, naming its columns, keeps them and
equals DuckDB's filter of the upstream as read. A graph view naming its columns reads the source's declared
columns, so a value that does not fit the new column's recorded type sets the row aside only in the views that
read that column."""

from __future__ import annotations

import json

from catalog_api.server import CatalogServer
from lakeview.config.evolution import added_columns
from lakeview.project import is_graph_view
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_evolution import assert_running_views_recomputed, read_delta, start
from tests.spark_jobs.test_pipeline import read_view


def test_graph_views_over_an_evolving_source_keep_named_columns_and_follow_star(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    source = f"gev_{unique_name}"[:36]
    star, top, both, both_dl = f"{source}_all", f"{source}_top", f"{source}_u", f"{source}_udl"
    union = f"SELECT * FROM {source} UNION ALL SELECT * FROM {source} WHERE amount > 6"  # * through UNION ALL
    dim, joined, joined_dl, down = f"{source}_dim", f"{source}_j", f"{source}_jdl", f"{source}_d"
    join = f"SELECT s.*, d.label FROM {source} s LEFT JOIN {dim} d ON s.id = d.id"  # a join side keeps s.* in state
    project = make_project(
        sources={
            source: {
                "format": "json",
                "path": f"landing/{source}",
                "schema": "id BIGINT, amount BIGINT",
                "new_columns": "evolve",
            },
            dim: {"format": "json", "path": f"landing/{dim}", "schema": "id BIGINT, label STRING"},
        },
        views={
            star: {"sql": f"SELECT * FROM {source}", "cadence": "100ms", "namespace": "evolution_tests"},
            top: {
                "sql": f"SELECT id, amount FROM {source} ORDER BY amount DESC LIMIT 3",
                "cadence": "100ms",
                "namespace": "evolution_tests",
            },
            both: {"sql": union, "cadence": "100ms", "namespace": "evolution_tests"},
            both_dl: {"sql": union, "cadence": "100ms", "namespace": "evolution_tests", "format": "delta"},
            joined: {"sql": join, "cadence": "100ms", "namespace": "evolution_tests"},
            joined_dl: {"sql": join, "cadence": "100ms", "namespace": "evolution_tests", "format": "delta"},
            # a view over the evolving graph view, naming its columns (SELECT * over it is refused at load)
            down: {
                "sql": f"SELECT id, amount FROM {both} WHERE amount > 1",
                "cadence": "100ms",
                "namespace": "evolution_tests",
            },
        },
    )
    assert all(is_graph_view(project, v) for v in (top, both, star))  # a one-source SELECT * too
    landing = project.source_path(source)
    land(project.source_path(dim), "000.json", [json.dumps({"id": i, "label": f"l{i}"}) for i in (2, 4, 5)])
    epochs = [
        [{"id": 1, "amount": 5}, {"id": 2, "amount": 1}],
        [{"id": 3, "amount": 7, "channel": "web"}, {"id": 4, "amount": 2, "items": 3}],
        [{"id": 5, "amount": 9, "channel": "store"}, {"id": 6, "amount": 8, "items": "lots"}],
    ]
    running = {v: start(spark, project, v, catalog_server) for v in (star, top, both, both_dl, joined, joined_dl)}
    _, downstream = start(spark, project, down, catalog_server)
    try:
        for number, rows in enumerate(epochs):
            land(landing, f"{number:03d}.json", [json.dumps(r) for r in rows])
            assert_running_views_recomputed(running, project, landing, catalog_server, number)
            downstream.processAllAvailable()  # reads the change the upstream published, new columns and all
            expected = [(r["id"], r["amount"]) for r in read_view(catalog_server, "evolution_tests", both).to_pylist()]
            got = [(r["id"], r["amount"]) for r in read_view(catalog_server, "evolution_tests", down).to_pylist()]
            assert sorted(got) == sorted(e for e in expected if e[1] > 1), f"{down} after epoch {number}"
    finally:
        for _, query in [*running.values(), (None, downstream)]:
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
    columns = ["id", "amount", "channel", "items"]
    unioned = read_view(catalog_server, "evolution_tests", both)
    assert unioned.column_names == columns and read_delta(str(project.table_location(both_dl))).column_names == columns
    rows = sorted((r["id"], r["channel"], r["items"]) for r in unioned.to_pylist())
    # id 1 and 2 were committed before the columns appeared (NULL); id 6's "lots" does not fit bigint: set aside
    assert rows == [(1, None, None), (2, None, None), (3, "web", None), (3, "web", None), (4, None, 3)] + [
        (5, "store", None),
        (5, "store", None),
    ]
    for view in (joined, joined_dl):
        table = read_view(catalog_server, "evolution_tests", view) if view == joined else None
        table = table if table is not None else read_delta(str(project.table_location(view)))
        assert set(table.column_names) == {"id", "amount", "channel", "items", "label"}, view

    # A restart after the source evolved (the join's state read back with the new columns), then dimension rows
    # that join a left row stored before the columns appeared (it reads NULL for them) and one stored after.
    running = {v: start(spark, project, v, catalog_server) for v in (joined, joined_dl)}
    try:
        land(project.source_path(dim), "001.json", [json.dumps({"id": i, "label": f"l{i}"}) for i in (1, 3)])
        land(landing, "003.json", [json.dumps({"id": 7, "amount": 4, "channel": "app", "items": 1})])
        assert_running_views_recomputed(running, project, landing, catalog_server, 3)
    finally:
        for _, query in running.values():
            query.stop()
    rows = {r["id"]: r for r in read_view(catalog_server, "evolution_tests", joined).to_pylist()}
    assert (rows[1]["label"], rows[1]["channel"]) == ("l1", None) and (rows[3]["label"], rows[3]["channel"]) == (
        "l3",
        "web",
    )
