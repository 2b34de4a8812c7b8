"""The graph's property test through the catalog: a random view query from the grammar
(tests/lakeview/graph/view_grammar.py) declared as a view over four change feeds, kept by
:class:`~spark_jobs.graph_pipeline.GraphPipeline` (real Spark, the real catalog, Iceberg or Delta tables), while
the grammar's random inserts, updates and deletes land as change-feed files, one epoch at a time. After every
epoch the view is read back as a reader would (DuckDB over the Iceberg REST catalog; DuckDB's ``delta_scan`` of
the Delta log) and compared, as a multiset, with DuckDB's recompute of the same SQL over the inputs' current
rows. Used by tests/spark_jobs/test_graph_properties.py (a fixed-seed slice) and ``bench/graph_fuzz.py
--catalog`` (any number of seeds)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from lakeview.errors import LakeviewError
from lakeview.project import parse_project
from lakeview.sql.planner import plan_for
from tests.duck_readers import catalog_reader, delta_reader
from tests.lakeview.graph.view_grammar import TABLES, Failure, Inputs, multiset, random_query
from tests.pipelines import view_pipeline
from tests.spark_jobs.test_changes import land

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeview.config.models import ProjectConfig

NS = "graph_fuzz"
SCHEMA = "id BIGINT, k BIGINT, g STRING, v BIGINT, x DOUBLE, op STRING, seq BIGINT"
FEED = {"operation": "op", "key": ["id"], "sequence": "seq", "insert": ["c"], "update": ["u"], "delete": ["d"]}
OPS = {"insert": "c", "update": "u", "delete": "d"}
CADENCE = "200ms"  # short: every epoch waits for the next trigger (twice) before it reads the view back


def is_graph_query(seed: int) -> bool:
    """Whether the seed's query is a graph view (the per-shape planner refuses it): only those run here."""
    return plan_for("v", random_query(seed), "duckdb").kind == "graph"


def graph_seeds(start: int, count: int, epochs: int) -> list[int]:
    """The first ``count`` seeds from ``start`` whose query is a graph view with rows after most of its
    ``epochs`` (many random queries select nothing from the grammar's small inputs: they would check little)."""
    found = (s for s in itertools.count(start) if is_graph_query(s) and 2 * epochs_with_rows(s, epochs) > epochs)
    return list(itertools.islice(found, count))


def epochs_with_rows(seed: int, epochs: int) -> int:
    """After how many of ``epochs`` the seed's query selects rows (DuckDB over the inputs, no Spark)."""
    query, inputs = random_query(seed), _inputs(seed)
    con = duckdb.connect()
    found = 0
    for _ in range(epochs):
        inputs.epoch()
        for t in TABLES:
            con.register(t, inputs.table(t))
        found += con.execute(query).to_arrow_table().num_rows > 0
    con.close()
    return found


def _inputs(seed: int) -> Inputs:
    """The seed's random inputs, the same as :func:`~tests.lakeview.graph.view_grammar.run_seed` makes."""
    r = random.Random(seed * 7919 + 1)
    r.random()  # run_seed's draw of eager or not: the pipeline always aggregates eagerly where valid
    return Inputs(r)


def fuzz_project(root: Path, lake_dir: Path, port: int, view: str, sql: str, fmt: str) -> ProjectConfig:
    """A project of four change feeds (t1..t4, keyed by id) under ``root`` and the one view ``view``."""
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": port},
        "sources": {
            t: {"format": "json", "path": str(root / "landing" / t), "schema": SCHEMA, "changes": FEED} for t in TABLES
        },
        "views": {view: {"sql": sql, "dialect": "duckdb", "cadence": CADENCE, "namespace": NS, "format": fmt}},
    }
    return parse_project(data, file=str(root / "lakeview.toml"), root=root)


def read_back(project: ProjectConfig, view: str, catalog_uri: str) -> pa.Table:
    """The view's rows as a reader sees them: DuckDB over the REST catalog (Iceberg) or the Delta log."""
    if project.views[view].format.value == "delta":
        con = delta_reader()
        sql = f"SELECT * FROM delta_scan('{project.table_location(view)}')"
    else:
        con = catalog_reader(catalog_uri, "lakeview")
        sql = f"SELECT * FROM lake.{NS}.{view}"
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def run_seed_through_catalog(
    spark: SparkSession,
    catalog_uri: str,
    port: int,
    lake_dir: Path,
    root: Path,
    seed: int,
    fmt: str = "iceberg",
    epochs: int = 4,
    prefix: str = "fz",
) -> Failure | None:
    """Run the seed's query as the view ``<prefix>_<fmt>_<seed>`` over the grammar's random changes (the same
    inputs as :func:`~tests.lakeview.graph.view_grammar.run_seed` makes for the seed); the first epoch where
    the view read back and DuckDB's recompute disagree (epoch -1: the view was refused at load), if any."""
    query, inputs = random_query(seed), _inputs(seed)
    view = f"{prefix}_{fmt}_{seed}"
    try:
        project = fuzz_project(root, lake_dir, port, view, query, fmt)
    except LakeviewError as exc:
        return Failure(seed, query, -1, f"load: {exc}")
    sequence = itertools.count(1)
    stream = None
    con = duckdb.connect()
    epoch = -1
    try:
        pipeline = view_pipeline(spark, project, view, catalog_uri)
        pipeline.prepare()
        stream = pipeline.start()
        for epoch in range(epochs):
            inputs.epoch()
            for t, changes in inputs.log.items():
                if changes:
                    lines = [json.dumps({**row, "op": OPS[op], "seq": next(sequence)}) for op, row in changes]
                    land(project.source_path(t), f"{epoch:03d}.json", lines)
            for _ in range(2):  # a trigger that listed the files just before the last one landed may end the first
                stream.processAllAvailable()
            for t in TABLES:
                con.register(t, inputs.table(t))
            expected = multiset(con.execute(query).to_arrow_table(), weighted=False)
            stored = multiset(read_back(project, view, catalog_uri), weighted=False)
            if stored != expected:
                return Failure(seed, query, epoch, f"extra {dict(stored - expected)} missing {dict(expected - stored)}")
    except Exception as exc:  # a failure to report with its seed, whatever it is
        return Failure(seed, query, epoch, f"{type(exc).__name__}: {str(exc).splitlines()[-1][:500]}")
    finally:
        if stream is not None:
            stream.stop()
        con.close()
    return None
