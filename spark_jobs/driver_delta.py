"""Small batches are aggregated on the driver by DuckDB instead of by a Spark job.

Why: a Spark aggregate is two stages and a shuffle; on a small machine it costs 0.1-0.3 s per
epoch however few rows the batch has, which alone is most of a 0.5 s refresh budget. A batch
of at most :data:`SMALL_BATCH_ROWS` rows is instead taken as Arrow and the plan's own SQL
runs over it in DuckDB (the dialect the maintainer already merges in), its result cast to
Spark's result types so the tables see exactly what the Spark path would write:

- a Parquet source with nothing to quarantine is read by DuckDB straight from the batch's
  files (Spark's file-source log names them): no Spark job at all in the epoch;
- any other source is collected from Spark once (one single-stage job), so Spark's parsing,
  schema and quarantine rules still decide what the rows are.

Large batches (the backfill of a history) stay on Spark: nothing here collects a source.
Only plain keyed aggregates over one append-only source take this path (no change feed,
images, windows or upstream views); anything else keeps the Spark path unchanged.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from lakeview.config.schema import parse_ddl
from lakeview.ivm.commits import CommitRecord, Epoch
from lakeview.sql.plan import WEIGHT, KeyedAggregatePlan
from spark_jobs.streams import collect_arrow

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_jobs.pipeline import ViewPipeline

log = logging.getLogger("lakeview.driver_delta")
SMALL_BATCH_ROWS = 200_000  # ~10 MB of Arrow for a narrow source: cheap to hold on the driver


@dataclass(frozen=True)
class DriverResult:
    """The epoch was maintained here (``record`` may be None: nothing to commit)."""

    record: CommitRecord | None


def applies(pipeline: ViewPipeline, rows_in: int) -> bool:
    plan = pipeline.plan
    return (
        rows_in <= SMALL_BATCH_ROWS
        and isinstance(plan, KeyedAggregatePlan)
        and plan.window is None
        and len(plan.sources) == 1
        and pipeline.feed is None
        and pipeline.images is None
        and pipeline.upstream_key is None
    )


def maintain_small_batch(
    pipeline: ViewPipeline, good: DataFrame, epoch: Epoch, files: list[Path] | None
) -> DriverResult | None:
    """Maintain the view with a small batch computed in DuckDB; None: not applicable here."""
    if not applies(pipeline, epoch.rows_in) or WEIGHT in good.columns:
        return None
    plan = pipeline.plan
    assert isinstance(plan, KeyedAggregatePlan)
    m = pipeline.maintainer
    rows = pipeline._spark_part(lambda: batch_rows(pipeline, good, files))
    pipeline.timings["driver_delta_rows"] = rows.num_rows  # in logs and bench/: this epoch took the DuckDB path
    con = _connection()
    try:
        con.register("batch_rows", rows)
        con.execute(f"CREATE OR REPLACE TEMP VIEW batch AS SELECT *, CAST(1 AS INTEGER) AS {WEIGHT} FROM batch_rows")
        sqls = batch_sqls(pipeline, plan)
        if m.view_is_state:
            delta = _cast(con.execute(sqls[0]).to_arrow_table(), output_schema(pipeline))
        else:
            group = m._cast(0, con.execute(sqls[0]).to_arrow_table())  # Spark's state types
            values = [m._cast(i, con.execute(sql).to_arrow_table()) for i, sql in enumerate(sqls[1:], start=1)]
    except (duckdb.Error, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        # SQL DuckDB runs differently, or a result that does not fit Spark's types: nothing is
        # committed yet, so Spark computes this epoch as it would without this path.
        log.warning("%s: epoch %s computed by Spark instead of DuckDB: %s", pipeline.view, epoch.number, exc)
        return None
    finally:
        con.execute("DROP VIEW IF EXISTS batch")
        con.unregister("batch_rows")
    if m.view_is_state:
        return DriverResult(pipeline._maintain_part(lambda: m.apply_view_delta(epoch, delta)))
    return DriverResult(pipeline._maintain_part(lambda: m.apply_state_deltas(epoch, group, values)))


def batch_rows(pipeline: ViewPipeline, good: DataFrame, files: list[Path] | None) -> pa.Table:
    """The batch's good rows as Arrow: from its Parquet files when nothing can be quarantined,
    else collected from Spark."""
    source = pipeline.source_config
    if files and source.format.reader_format == "parquet" and not pipeline.quarantine.checks(None):
        columns = parse_ddl(source.schema_)
        select = ", ".join(f'CAST("{c.name}" AS {c.type_sql("duckdb")}) AS "{c.name}"' for c in columns)
        listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
        try:
            return (
                _connection()
                .execute(f"SELECT {select} FROM read_parquet([{listed}], union_by_name = true)")
                .to_arrow_table()
            )
        except duckdb.Error:
            pass  # a file DuckDB reads differently from Spark (a missing column, a type): ask Spark
    return collect_arrow(good)


_local = threading.local()


def _connection() -> duckdb.DuckDBPyConnection:
    """This thread's DuckDB connection, made once: opening a database per epoch (twice) cost more than the
    batch's queries on a loaded machine (pyinstrument, bench/refresh.py --views stats)."""
    con = getattr(_local, "con", None)
    if con is None:
        con = _local.con = duckdb.connect()
    return con


def batch_sqls(pipeline: ViewPipeline, plan: KeyedAggregatePlan) -> list[str]:
    """DuckDB SQL over the relation ``batch``: the view's SQL (a view that is its own state), else the group
    delta's and each multiset delta's. Made once per plan (each is a sqlglot transpile: ~4 per epoch)."""
    cached = getattr(pipeline, "_driver_batch_sqls", None)
    if cached is None or cached[0] is not plan:
        if pipeline.maintainer.view_is_state:
            sqls = [plan.batch_sql({pipeline.source: "batch"}, "duckdb")]
        else:
            sqls = [plan.group_delta_sql("batch", "duckdb")]
            sqls += [plan.multiset_delta_sql(i, "batch", "duckdb") for i in range(len(plan.multisets))]
        cached = (plan, sqls)
        pipeline._driver_batch_sqls = cached  # type: ignore[attr-defined]
    return cached[1]


def output_schema(pipeline: ViewPipeline) -> pa.Schema:
    """Spark's result schema of the view's SQL (analysed once per pipeline)."""
    cached = getattr(pipeline, "_driver_output_schema", None)
    if cached is None:
        cached = pipeline.output_schema()
        pipeline._driver_output_schema = cached  # type: ignore[attr-defined]
    return cached


def _cast(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return table.select(schema.names).cast(schema)
