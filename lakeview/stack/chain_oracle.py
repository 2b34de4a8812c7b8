"""The oracle for a view over views: a full recompute from the base sources, through the chain.

A downstream's commit records the upstream epoch and snapshot it reached (its frontier's
``upstream_snapshot``). The expected rows are the downstream's SQL over the upstream's rows at
that snapshot — and those are recomputed too, not read: the upstream's SQL over *its* frontier
at that snapshot, down to the base view, whose rows are recomputed from exactly the source
files it had read (:func:`lakeview.ivm.oracle.recompute`). So ``lakeview verify DOWNSTREAM`` checks
the whole chain against the sources, in DuckDB.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlglot

from catalog_api.ops import view_tables as tables
from catalog_api.ops.view_tables import commit_history
from lakeview.errors import LakeviewError
from lakeview.ivm import oracle
from lakeview.sql.dag import upstreams_of
from lakeview.sql.duck import connect
from lakeview.sql.graph_plan import GraphPlan
from lakeview.sql.planner import view_plan

if TYPE_CHECKING:
    import pyarrow as pa

    from lakeview.config.models import ProjectConfig
    from lakeview.ivm.commits import CommitRecord


def record_at(project: ProjectConfig, view: str, snapshot_id: int) -> CommitRecord:
    """The Lakeview commit that made snapshot (Delta: version) ``snapshot_id`` of ``view``."""

    for record in commit_history(project, view, limit=100_000):
        if record.snapshot_id == snapshot_id:
            return record
    raise LakeviewError(f"{view}: snapshot {snapshot_id} is not in its history (expired?); cannot recompute through it")


def expected_rows(project: ProjectConfig, view: str, record: CommitRecord) -> tuple[pa.Table, str]:
    """The rows ``view`` should hold at ``record`` recomputed from the base sources, and how
    (``"3 files of orders -> lines@epoch 2 -> ..."``)."""

    if upstreams_of(project, view):
        return _graph_expected(project, view, record)
    files = oracle.frontier_files(project, view, record.frontier)  # per source (a join reads several)
    read = " + ".join(f"{len(found)} files of {source}" for source, found in files.items())
    return oracle.recompute(project, view, files), f"{read} -> {view}@epoch {record.epoch}"


def _graph_expected(project: ProjectConfig, view: str, record: CommitRecord) -> tuple[pa.Table, str]:
    """A view reading views: each upstream view recomputed at the snapshot this commit reached, each declared
    source from the files it had read, then the view's SQL."""

    plan = view_plan(project, view)
    files = oracle.frontier_files(project, view, record.frontier)
    relations: dict[str, pa.Table] = {}
    hows: list[str] = []
    for source in plan.sources:
        if source not in upstreams_of(project, view):
            relations[source] = oracle.source_rows(project, source, files[source])
            hows.append(f"{len(files[source])} files of {source}")
            continue
        snapshot = record.frontier.get(source, {}).get("upstream_snapshot")
        if snapshot is None:  # nothing read from the upstream yet: it stands for no rows
            relations[source] = tables.read_rows(project, source).slice(0, 0)
            hows.append(f"{source}@nothing yet")
            continue
        relations[source], how = expected_rows(project, source, record_at(project, source, int(snapshot)))
        hows.append(how)
    assert isinstance(plan, GraphPlan)
    rows = over_relations(plan.duckdb_sql(), relations, "duckdb")
    return rows, f"({' + '.join(hows)}) -> {view}@epoch {record.epoch}"


def over_rows(spark_sql: str, relation: str, rows: pa.Table) -> pa.Table:
    """A view's (Spark) SQL run in DuckDB over ``rows`` standing in for ``relation``."""
    return over_relations(spark_sql, {relation: rows})


def over_relations(spark_sql: str, relations: dict[str, pa.Table], dialect: str = "spark") -> pa.Table:
    """A view's SQL (in ``dialect``: Spark's by default) run in DuckDB over tables standing in for the relations
    it reads (a graph view may read several)."""

    con = connect()
    try:
        for name, rows in relations.items():
            con.register(name, rows)
        sql = spark_sql if dialect == "duckdb" else sqlglot.transpile(spark_sql, read=dialect, write="duckdb")[0]
        return con.execute(sql).to_arrow_table()
    finally:
        con.close()
