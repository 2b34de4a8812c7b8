"""One streaming query for a view over several sources (a join or a UNION ALL).

Spark unions the per-source file streams into one (each source's columns prefixed
``__lv_s<i>_`` plus a ``__lv_src`` tag), so one trigger reads what arrived in *every* source
and one epoch (the batch id) covers them all; Spark's offset log holds one position per
source, in source order, and each source keeps its own file log (``sources/<i>``). Per epoch,
each source's part of the batch is quarantined as usual and turned into its input (a change
feed's newest change per key, an image feed's Z-set, an append stream's rows with weight +1);
:class:`lakeview.ivm.combine.CombinedMaintainer` does the rest. :class:`CombinedPipeline` has the
same surface as :class:`~spark_jobs.pipeline.ViewPipeline`, which hands such views to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from lakeview.config.schema import parse_ddl
from lakeview.ivm.combine import CombinedMaintainer, side_table_names, source_mirror_name
from lakeview.ivm.commits import CommitRecord
from lakeview.ivm.zsets import state_table_names
from lakeview.sql.dag import deleting_sources, upstreams_of
from lakeview.sql.dialects import sql_properties
from lakeview.sql.joins import JoinPlan, joined_column, sql_over_sources
from lakeview.sql.plan import WEIGHT, KeyedAggregatePlan
from lakeview.sql.planner import view_plan
from lakeview.sql.union import UnionPlan
from spark_jobs import faults
from spark_jobs.analysis import with_sum_types
from spark_jobs.executors.combined_bootstrap import bootstrap_on_executors, bootstraps
from spark_jobs.sources.upstream import with_upstream_source
from spark_jobs.sources.view_changes import ChangePublisher
from spark_jobs.sources_pipeline import SourcesPipeline
from spark_jobs.streams import collect_arrow, reconcile_checkpoint
from writers.base import SnapshotWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeview.config.models import ProjectConfig


def combined_pipeline(
    spark: SparkSession, project: ProjectConfig, view: str, *args, **kwargs
) -> CombinedPipeline | None:
    """The pipeline of a join or UNION ALL view; None for a view over one source."""
    if view_plan(project, view).kind not in ("join", "union"):
        return None
    return CombinedPipeline(spark, project, view, *args, **kwargs)


class CombinedPipeline(SourcesPipeline):
    """Keeps one join or UNION ALL view fresh: ``prepare()`` once, then ``start()``."""

    def __init__(
        self,
        spark: SparkSession,
        project: ProjectConfig,
        view: str,
        writer: SnapshotWriter,
        on_commit: Callable[[CommitRecord], None] | None = None,
        state_writer: Callable[[str], SnapshotWriter] | None = None,
    ) -> None:
        self.upstreams = set(upstreams_of(project, view))  # upstream views: their change files, Z-sets with weights
        self.publisher = ChangePublisher.for_view(project, view, writer)  # None unless other views read this one
        deleting = deleting_sources(project, view)  # (before the upstream views become Parquet sources below)
        project = with_upstream_source(spark, project, view)
        plan = view_plan(project, view)
        assert isinstance(plan, (JoinPlan, UnionPlan))
        super().__init__(spark, project, view, plan, writer, on_commit, state_writer)
        self.plan: JoinPlan | UnionPlan = plan
        feeds = {s: c.changes for s, c in self.configs.items() if c.changes is not None}
        self.maintainer = CombinedMaintainer(plan=plan, view=writer, feeds=feeds, deleting=deleting)  # type: ignore[arg-type]

    # --- schemas (Spark's analysis over empty batches) ------------------------------------
    def _empty(self, source: str, weighted: bool = False) -> DataFrame:
        from pyspark.sql import functions as F  # lazy: Spark loads only where views run

        empty = self.spark.createDataFrame([], schema=self.configs[source].schema_)
        if source in self.upstreams:
            empty = empty.drop(WEIGHT)  # the upstream view's columns (its change files add the weight)
        return empty.withColumn(WEIGHT, F.lit(1).cast("int")) if weighted else empty

    def _relations(self, weighted: bool = False) -> dict[str, str]:
        names = {}
        for source in self.sources:
            names[source] = f"__lv_{self.view}_{source}_schema"
            self._empty(source, weighted).createOrReplaceTempView(names[source])
        return names

    def _arrow_schema(self, df: DataFrame) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_schema  # lazy: Spark loads only where views run

        return to_arrow_schema(df.schema)

    def output_schema(self) -> pa.Schema:
        return self._arrow_schema(self.spark.sql(sql_over_sources(self.plan.sql, self._relations())))

    def _combined_relation(self) -> str:
        """An empty weighted relation shaped like the join's or union's output, for the top's schemas."""
        relations = self._relations(weighted=True)
        if isinstance(self.plan, JoinPlan):
            cols = [f"{s.alias}.`{c}` AS `{joined_column(s.alias, c)}`" for s in self.plan.sides for c in s.columns]
            a, b = self.plan.sides
            sql = f"SELECT {', '.join(cols)}, CAST(1 AS INT) AS {WEIGHT} FROM {relations[a.source]} AS {a.alias} CROSS JOIN {relations[b.source]} AS {b.alias}"
            df = self.spark.sql(sql)
        else:
            df = self.spark.sql(self.plan.union_sql(relations, "spark")).toDF(*self.plan.columns, WEIGHT)
        name = f"__lv_{self.view}_combined_schema"
        df.createOrReplaceTempView(name)
        return name

    def prepare(self) -> None:
        """Create the view's, its operators' and its mirrors' tables; reconcile Spark's checkpoint."""
        for source in self.sources:
            self.project.source_path(source).mkdir(parents=True, exist_ok=True)
        m = self.maintainer
        properties = {"lakeview.sql": self.config.sql, "lakeview.cadence": str(self.config.cadence)}
        properties.update(sql_properties(self.config.sql, self.config.dialect))
        self.writer.ensure_table(self.output_schema(), m.view_key, properties)
        owned = {"lakeview.state-of": self.view}
        top = self.plan.top
        if isinstance(top, KeyedAggregatePlan):
            rel = self._combined_relation()
            top = with_sum_types(self.spark, top, rel)  # exact weighted sums, overflow an error
            self.plan = m.plan = self.plan.model_copy(update={"top": top})
            schemas = [self._arrow_schema(self.spark.sql(top.group_delta_sql(rel)))]
            schemas += [
                self._arrow_schema(self.spark.sql(top.multiset_delta_sql(i, rel))) for i in range(len(top.multisets))
            ]
            m.state = [self._state_writer(name) for name in state_table_names(self.view, top)]
            m.state_schemas = schemas
            for i, (writer, schema) in enumerate(zip(m.state, schemas)):
                writer.ensure_table(schema, top.keys if i == 0 else (*top.keys, "__lv_v"), owned)
        if isinstance(self.plan, JoinPlan):
            m.sides = [self._state_writer(name) for name in side_table_names(self.view, self.plan)]
            for writer, side in zip(m.sides, self.plan.sides):
                df = self._empty(side.source).selectExpr(
                    *[f"`{c}`" for c in side.columns], "CAST(0 AS BIGINT) AS __lv_n"
                )
                writer.ensure_table(self._arrow_schema(df), side.columns, owned)
        for source, feed in m.feeds.items():
            schema = self._arrow_schema(self._empty(source))
            m.mirrors[source] = self._state_writer(source_mirror_name(self.view, source))
            m.mirrors[source].ensure_table(schema, tuple(feed.key), owned)
        m.source_columns = {
            s: [c.name for c in parse_ddl(self.configs[s].schema_) if c.name != WEIGHT] for s in self.sources
        }
        self._last_epoch = reconcile_checkpoint(self.view, self.checkpoint, self.maintainer, self.writer)
        self.publish_changes()  # epochs committed before a crash, not yet published

    def publish_changes(self) -> None:
        """Publish the committed epochs' changes for the views reading this one (lakeview.view_changes)."""
        if self.publisher is not None:
            self.publisher.publish()

    # --- streaming (SourcesPipeline's surface; its hooks below) -----------------------------
    def _after_batch(self, epoch_id: int) -> None:
        faults.point("before_publish", epoch_id)
        self.publish_changes()

    def _process_batch(self, batch: DataFrame, epoch_id: int) -> CommitRecord | None:
        started = time.perf_counter()
        self.last_write = {}  # set by the path that says how the rows went

        def join_columns(source: str) -> list[str] | None:  # only what the join reads
            if not isinstance(self.plan, JoinPlan):
                return None
            return [c for side in self.plan.sides if side.source == source for c in side.columns]

        split, epoch = self._epoch(batch, epoch_id, join_columns)
        frames = split.frames

        if bootstraps(self, epoch):  # a large first batch: every table written by the executors, nothing collected
            read_s, started = time.perf_counter() - started, time.perf_counter()
            done = bootstrap_on_executors(self, frames, epoch)
            if done is not None:
                self.timings = {"spark_read_quarantine_s": read_s, "maintain_s": time.perf_counter() - started}
                self.last_write = done.report()
                return done.record
        inputs = {source: collect_arrow(frame) for source, frame in frames.items()}
        self.timings = {"spark_read_quarantine_s": time.perf_counter() - started}
        self.last_write = {"by": "driver", "rows_collected": sum(t.num_rows for t in inputs.values())}
        started = time.perf_counter()
        record = self.maintainer.apply(epoch, inputs)
        self.timings["maintain_s"] = time.perf_counter() - started
        return record
