"""Graph views in view DAGs, both directions, through real Spark and the real catalog, on Iceberg and on
Delta: orders (append-only) and change feeds of products, customers and regions (inserts, updates,
deletes) -> a projection of orders (an append view) and a per-category aggregate of products (a keyed
aggregate); over them, graph views: a 3-way join with GROUP BY reading the append view, a top-k
(``ORDER BY … LIMIT``) reading the keyed aggregate, a top-k reading the first graph view; and over the graph
views, views of every other kind: a keyed aggregate, an inner JOIN of two graph views, and a projection
(kept as a graph view too: its input is a multiset keyed by the whole row). After every epoch
each view read back equals DuckDB's recompute of its SQL over the sources (through its upstreams' SQL), and
what ``lakeview verify`` recomputes at its committed frontier."""

from __future__ import annotations

import pytest

from catalog_api.ops import view_tables as tables
from lakeview.ivm import oracle
from lakeview.project import is_graph_view
from lakeview.sql.dag import view_key
from lakeview.stack.chain_oracle import expected_rows, over_relations
from lakeview.stack.embedded import EmbeddedStack
from spark_jobs.graph_pipeline import GraphPipeline
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_graph_pipeline import EPOCHS, SOURCES


def dag(prefix: str) -> dict[str, str]:
    """The views by role (role -> name) and their SQL (name -> SQL)."""
    lines, cats, star = f"{prefix}_lines", f"{prefix}_cats", f"{prefix}_star"
    topcat, top2, per, paired = f"{prefix}_topcat", f"{prefix}_top2", f"{prefix}_per", f"{prefix}_paired"
    proj = f"{prefix}_proj"
    return {
        lines: "SELECT id, pid, cid, qty FROM orders WHERE qty > 1",  # an append view
        cats: "SELECT category, COUNT(*) AS n, MAX(price) AS top FROM products GROUP BY category",  # keyed
        star: (  # graph over an append view and two change feeds
            f"SELECT r.region, COUNT(*) AS n, SUM(l.qty) AS qty FROM {lines} l JOIN customers c ON l.cid = c.id "
            "JOIN regions r ON c.rid = r.id GROUP BY r.region"
        ),
        topcat: f"SELECT category, n, top FROM {cats} ORDER BY n DESC, category LIMIT 2",  # graph over a keyed view
        top2: f"SELECT region, qty FROM {star} ORDER BY qty DESC, region LIMIT 2",  # graph over a graph view
        per: f"SELECT region, SUM(qty) AS qty, COUNT(*) AS k FROM {top2} GROUP BY region",  # keyed, over a graph
        paired: (  # a join of two graph views (every join is a graph view)
            f"SELECT t.region, t.qty, s.n FROM {top2} t JOIN {star} s ON t.region = s.region"
        ),
        proj: f"SELECT region, qty FROM {star} WHERE n > 10",  # a projection over a graph view: a graph too
    }


def settle(project, stack: EmbeddedStack, views: list[str]) -> None:
    """Process what has landed in every view, upstreams first, until a pass commits nothing new. One pass is
    not always enough: a view's trigger may list its files just before an upstream publishes or a file
    lands, and ``processAllAvailable`` then returns when that trigger ends without having read them."""
    seen = None
    for _ in range(6):
        for view in views:
            stack.queries[view].processAllAvailable()
        now = {view: getattr(tables.last_commit(project, view), "epoch", None) for view in views}
        if now == seen:
            return
        seen = now


def expected_now(project, sqls: dict[str, str]) -> dict[str, object]:
    """Every view recomputed by DuckDB from every landed file of the sources, through its upstreams' SQL."""
    rows = {s: oracle.source_rows(project, s, oracle.landed_files(project.source_path(s))) for s in project.sources}
    for view, sql in sqls.items():  # upstreams first
        rows[view] = over_relations(sql, rows)
    return rows


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_graph_views_read_views_and_are_read_by_views_equal_the_recompute_after_every_epoch(
    spark, catalog_server, make_project, unique_name: str, fmt: str
) -> None:
    sqls = dag(f"{fmt[:3]}_{unique_name[:20]}")  # names of their own per format: the warehouse is shared
    lines, cats, star, topcat, top2, per, paired, proj = sqls
    declared = dict(reversed(list(sqls.items())))  # downstreams first: the DAG orders them
    views = {
        n: {"sql": sql, "cadence": "100ms", "namespace": "graph_dag", "format": fmt} for n, sql in declared.items()
    }
    project = make_project(views=views, sources=SOURCES)
    assert [v for v in sqls if is_graph_view(project, v)] == list(sqls)  # every view, one-source ones too
    assert view_key(project, top2) == ("region", "qty"), "a graph view is a multiset keyed by the whole row"
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        order = list(stack.pipelines)
        assert order.index(lines) < order.index(star) < order.index(top2) < min(order.index(per), order.index(paired))
        assert isinstance(stack.pipelines[top2], GraphPipeline) and stack.pipelines[top2].upstreams == {star}
        for number, batch in enumerate(EPOCHS):
            for source, rows in batch.items():
                land(project.source_path(source), f"{number:03d}.json", rows)
            settle(project, stack, list(sqls))
            expected = expected_now(project, sqls)
            for view in sqls:
                comparison = oracle.compare(tables.read_rows(project, view), expected[view])
                assert comparison.equal, f"{view} after epoch {number}: {comparison.describe()}"
                record = tables.last_commit(project, view)
                at_frontier, how = expected_rows(project, view, record)  # what `lakeview verify` checks
                comparison = oracle.compare(tables.read_rows(project, view, record.snapshot_id), at_frontier)
                assert comparison.equal, f"{view} at its frontier after epoch {number} ({how}): {comparison.describe()}"
    finally:
        stack.stop_views()
    final = expected_now(project, sqls)
    assert final[top2].num_rows == 2 and final[per].num_rows == 2 and final[topcat].num_rows == 2
    assert final[paired].num_rows == 2, "both top regions join their star row"


def test_a_graph_view_killed_between_its_commit_and_its_publication_publishes_on_restart(spark, tmp_path) -> None:
    """`lakeview refresh` of a graph view killed after it committed epoch 1 and before it published the change:
    the restart publishes it (derived from the committed snapshot), so the keyed aggregate and the graph view
    reading it end equal to the recompute from the sources, and `lakeview verify` agrees through the chain."""
    import json
    import signal

    from typer.testing import CliRunner

    from lakeview.cli.main import app
    from spark_jobs.sources.view_changes import reader_path
    from tests.spark_jobs.test_crash import project_on_disk
    from tests.spark_jobs.test_view_dag import refresh_in_process, refresh_in_subprocess

    star = "cstar"
    sqls = {
        star: (
            "SELECT r.region, COUNT(*) AS n, SUM(o.qty) AS qty FROM orders o JOIN customers c ON o.cid = c.id "
            "JOIN regions r ON c.rid = r.id GROUP BY r.region"
        ),
        "cper": f"SELECT region, SUM(qty) AS qty, COUNT(*) AS k FROM {star} GROUP BY region",
        "ctop": f"SELECT region, n FROM {star} ORDER BY n DESC, region LIMIT 1",
    }
    data = {
        "lake": {"warehouse": "lake"},
        "server": {"port": 0},
        "sources": SOURCES,
        "views": {n: {"sql": sql, "cadence": "manual", "namespace": "graph_dag"} for n, sql in sqls.items()},
    }
    project = project_on_disk(tmp_path, data)
    for number in (0, 1):
        for source, rows in EPOCHS[number].items():
            land(project.source_path(source), f"{number:03d}.json", rows)
        if number == 0:
            refresh_in_process(spark, project, list(sqls))
    assert refresh_in_subprocess(tmp_path, star, "before_publish:1") == -signal.SIGKILL
    assert tables.last_commit(project, star).epoch == 1
    assert not list(reader_path(project, star, "cper").glob("epoch-000000000001-*")), "killed before publishing"
    refresh_in_process(spark, project, list(sqls))
    expected = expected_now(project, sqls)
    for view in sqls:
        comparison = oracle.compare(tables.read_rows(project, view), expected[view])
        assert comparison.equal, f"{view} after the restart: {comparison.describe()}"
    assert json.loads((reader_path(project, star, "ctop") / "_published.json").read_text())["epoch"] == 1
    verify = CliRunner().invoke(app, ["verify", "ctop", "-p", str(tmp_path)])
    assert verify.exit_code == 0 and "equal" in verify.output and f"{star}@epoch 1 -> ctop@epoch 1" in verify.output, (
        verify.output
    )
