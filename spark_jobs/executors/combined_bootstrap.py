"""A join or UNION ALL view's first large batch (a backfill), computed by Spark and written by
its executors (:mod:`spark_jobs.executors.bootstrap` does the same for a view over one source).

:class:`lakeview.ivm.combine.CombinedMaintainer` merges each epoch in the driver: every source's
input is collected, the join or union turns them into the Z-set of the combined relation, and
the top operator, the join's side tables and the change feeds' mirrors take it. A new view over
history already landed would collect the sources' whole history. Such a batch, past ``[spark]
driver_rows_max`` input rows (over all sources) and with every table the view keeps still
empty (or holding this very epoch: a replay), is never collected. With nothing stored, each
table's rows after the epoch are a Spark query over the batch, in the maintainer's commit order:

- each source's **Z-set**: a change feed's newest non-delete image per key at +1 (its empty
  mirror has nothing to retract), otherwise the input the driver would collect (an image feed's
  or an upstream view's weighted rows, an append stream's rows at +1);
- the **combined Z-set**: a join's per-side net deltas joined on the key (weights multiplied;
  ``=`` never matches NULL), plus for a LEFT join each left row whose key has no match weight
  in the right delta, NULL-extended (what :func:`lakeview.sql.joins.join_delta_sql` gives with no
  stored rows), consolidated; a union's branches over the sources' Z-sets;
- the top aggregate's **state tables** (:func:`spark_jobs.executors.bootstrap.group_state_sql` and
  ``multiset_state_sql`` over the combined Z-set), then the **view**: the top aggregate's SQL
  over the combined Z-set's net rows, or for a projection (or a bare union) its weighted rows,
  each distinct row as many times as its net weight (what ``multiset_change`` and
  ``appended_rows`` store over an empty view);
- the join's **side tables**: each side's net delta, the weight as the multiplicity;
- the change feeds' **mirrors**, last: their newest non-delete images.

Each table's snapshot is stamped with the epoch, a table that has it already skips it, so a
crash between two commits is repaired by the replay. Left to the driver: a batch at or below
the bound, a later batch, a watermark (refused for these views by the config check), an
event-time window in the top aggregate, and (found by a Spark query before anything is written)
an aggregate over a combined Z-set with a row of negative net weight (an image feed or an
upstream view whose batch retracts rows it does not hold): the driver's state keeps such a row
and its view is finalized from that state, which the view's SQL over net rows cannot match.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lakeview.ivm.changefeed import DELETE, OP
from lakeview.ivm.commits import Epoch
from lakeview.sql.joins import NEW_MATCHES as MATCHES
from lakeview.sql.joins import JoinPlan, JoinSide
from lakeview.sql.plan import COUNT, WEIGHT, KeyedAggregatePlan
from spark_jobs.executors.bootstrap import (
    Bootstrap,
    check_sums,
    group_state_sql,
    multiset_state_sql,
    net_rows_sql,
    retracts_unheld,
    write_in_order,
)
from writers.base import SnapshotWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.multi_source import CombinedPipeline

log = logging.getLogger("lakeview.pipeline")


def bootstraps(pipeline: CombinedPipeline, epoch: Epoch) -> bool:
    """Whether ``epoch`` is a large first batch the executors write (see the module's doc)."""
    if epoch.rows_in <= pipeline.project.spark.driver_rows_max or pipeline.config.watermark is not None:
        return False
    top = pipeline.plan.top
    if top is not None and top.window is not None:
        return False  # an event-time window over a join or union: the driver merges
    # Empty, or holding this very epoch (a replay after a crash between two tables' commits).
    return all((last := w.last_commit()) is None or last.epoch == epoch.number for w in pipeline.maintainer.tables())


def bootstrap_on_executors(pipeline: CombinedPipeline, frames: dict[str, DataFrame], epoch: Epoch) -> Bootstrap | None:
    """Write the first batch's state, view, side and mirror rows from the executors, one snapshot
    per table stamped with ``epoch``. ``frames``: per source, the DataFrame the driver's path
    would collect (:meth:`CombinedPipeline._process_batch`). None: the batch is left to the
    driver (a negative net weight under an aggregate, see the module's doc); nothing written."""
    spark = next(iter(frames.values())).sparkSession  # a foreachBatch's temp views live in its session

    held: list[
        DataFrame
    ] = []  # persisted: each feeds several tables' jobs (the batch itself is persisted by the pipeline)
    try:
        return _write_tables(pipeline, frames, epoch, spark, held)
    finally:
        for df in held:
            df.unpersist()


def _write_tables(
    pipeline: CombinedPipeline, frames: dict[str, DataFrame], epoch: Epoch, spark: SparkSession, held: list[DataFrame]
) -> Bootstrap | None:
    """The Spark relations of every table (see the module's doc), then each written in commit order."""
    from pyspark.sql import functions as F  # lazy: Spark loads only where views run

    m, plan = pipeline.maintainer, pipeline.plan

    def name(suffix: str) -> str:
        return f"__lv_{pipeline.view}_boot_{suffix}"

    def hold(df: DataFrame) -> DataFrame:
        held.append(df.persist())
        return df

    zsets, mirrors = {}, {}
    for source, frame in frames.items():
        if source in m.feeds:
            images = hold(frame.where(F.col(OP) != DELETE).select(*[F.col(f"`{c}`") for c in m.source_columns[source]]))
            mirrors[source] = images
            frame = images.withColumn(WEIGHT, F.lit(1).cast("int"))
        zsets[source] = name(f"{source}_zset")
        frame.createOrReplaceTempView(zsets[source])

    deltas: list[str] = []
    if isinstance(plan, JoinPlan):
        for i, side in enumerate(plan.sides):
            deltas.append(name(f"delta{i}"))
            hold(spark.sql(side_delta_sql(side, zsets[side.source]))).createOrReplaceTempView(deltas[i])
        combined = hold(spark.sql(first_join_sql(plan, deltas[0], deltas[1])))
    else:
        combined = hold(spark.sql(plan.union_sql(zsets, "spark")).toDF(*plan.columns, WEIGHT))
    zset = name("combined")
    combined.createOrReplaceTempView(zset)
    columns = [c for c in combined.columns if c != WEIGHT]

    top = plan.top
    tables: list[tuple[SnapshotWriter, DataFrame]] = []
    if isinstance(top, KeyedAggregatePlan):
        retracting = [s for s in plan.sources if s in pipeline.upstreams or pipeline.configs[s].images is not None]
        if retracting and retracts_unheld(spark, columns, zset):
            log.info("%s: epoch %s: a row of negative net weight (from %s); the driver merges it", pipeline.view, epoch.number,
                     ", ".join(retracting))  # fmt: skip
            return None
        check_sums(top, spark, zset)
        tables.append((m.state[0], spark.sql(group_state_sql(top, zset))))
        tables += [(w, spark.sql(multiset_state_sql(top, i, zset))) for i, w in enumerate(m.state[1:])]
        spark.sql(net_rows_sql(columns, zset)).createOrReplaceTempView(name("net"))
        view_rows = spark.sql(top.batch_sql({top.sources[0]: name("net")}))
    else:
        weighted = zset
        if top is not None:
            weighted = name("weighted")
            spark.sql(top.weighted_sql(zset, "spark")).createOrReplaceTempView(weighted)
        outputs = [c for c in spark.table(weighted).columns if c != WEIGHT]
        view_rows = spark.sql(net_rows_sql(outputs, weighted))
    tables.append((m.view, view_rows))
    if isinstance(plan, JoinPlan):
        for writer, side, delta in zip(m.sides, plan.sides, deltas):
            cols = ", ".join(f"`{c}`" for c in side.columns)
            tables.append((writer, spark.sql(f"SELECT {cols}, {WEIGHT} AS {COUNT} FROM {delta}")))
    tables += [(m.mirrors[s], mirrors[s]) for s in m.mirrors]  # last: a replay finds the epoch unfinished until here
    return write_in_order(tables, m.view, epoch, pipeline.project)


def side_delta_sql(side: JoinSide, zset: str) -> str:
    """Spark SQL: a side's net change per row (``__lv_w``; rows whose weights cancel drop out), as
    :func:`lakeview.sql.joins.side_delta_sql` computes it in DuckDB."""
    cols = ", ".join(f"`{c}`" for c in side.columns)
    return f"SELECT {cols}, CAST(SUM({WEIGHT}) AS BIGINT) AS {WEIGHT} FROM {zset} GROUP BY {cols} HAVING SUM({WEIGHT}) <> 0"


def first_join_sql(plan: JoinPlan, da: str, db: str) -> str:
    """Spark SQL: the join's Z-set for an epoch with nothing stored (``da``/``db``: each side's
    net delta): :func:`lakeview.sql.joins.join_delta_sql` with empty stored sides, i.e. ``da ⋈ db``
    plus, for a LEFT join, each row of ``da`` whose key's match weight in ``db`` sums to 0,
    NULL-extended."""
    a, b = plan.sides
    on = " AND ".join(f"l.`{x}` = r.`{y}`" for x, y in zip(a.key, b.key))
    left = [f"l.`{c}` AS `{n}`" for c, n in zip(a.columns, a.joined())]
    parts = [
        f"SELECT {', '.join(left + [f'r.`{c}` AS `{n}`' for c, n in zip(b.columns, b.joined())])}, l.{WEIGHT} * r.{WEIGHT} AS {WEIGHT} "
        f"FROM {da} AS l JOIN {db} AS r ON {on}"
    ]
    if plan.how == "left":
        keys = ", ".join(f"`{k}`" for k in b.key)
        matches = f"SELECT {keys}, SUM({WEIGHT}) AS {MATCHES} FROM {db} GROUP BY {keys}"
        nulls = [f"NULL AS `{n}`" for n in b.joined()]
        parts.append(
            f"SELECT {', '.join(left + nulls)}, l.{WEIGHT} AS {WEIGHT} FROM {da} AS l LEFT JOIN ({matches}) AS r ON {on} "
            f"WHERE COALESCE(r.{MATCHES}, 0) = 0"
        )
    names = ", ".join(f"`{n}`" for n in [*a.joined(), *b.joined()])
    body = " UNION ALL ".join(f"({p})" for p in parts)
    return f"SELECT {names}, CAST(SUM({WEIGHT}) AS INT) AS {WEIGHT} FROM ({body}) GROUP BY {names} HAVING SUM({WEIGHT}) <> 0"
