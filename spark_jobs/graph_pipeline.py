"""One streaming query for a view kept as an operator graph (:mod:`lakeview.graph`): every join (two
inputs or more, inner or outer) and union, CTEs, subqueries, top-k, ``ORDER BY … LIMIT`` — every view
but a projection or keyed aggregate over one source.

The query reads every source of the view (:mod:`spark_jobs.source_frames`). Per
epoch each source's input becomes a Z-set (a change feed's newest change per key against its mirror:
the old image −1, the new +1; an image feed's before −1 / after +1; an append stream's rows +1), the
graph's ``step`` turns them into the view's delta, cast to the table's types (Spark's, as the one-source stack
typed it: :mod:`lakeview.graph.output_types`), and the delta is applied to the view's table by its unique key
(an aggregate's GROUP BY columns, a change feed's kept key: :func:`writers.graph_view.keyed_change`), else as a
multiset keyed by the whole row (:func:`writers.graph_view.multiset_change`). The operators' state
lives in Lakeview-owned tables (:class:`writers.graph_state.TableStateStore`).

Exactly once. Iceberg: the view's table, every state table and every change-feed mirror are committed
in ONE catalog transaction per epoch (:class:`writers.iceberg.group.IcebergGroupWriter`, each snapshot
stamped with the epoch), so they never stand at different epochs; an epoch the tables already hold is
skipped before anything is read. Delta has no multi-table transaction: the state tables and mirrors are
committed first, the view's table last, each skipping an epoch it already has (its app transaction),
and a replay is skipped once the view's table holds the epoch. After a crash *between* those commits
the replayed epoch reads the tables that already hold it as they stood before it (Delta time travel to
the version before their commit of the epoch), so it computes the same change; only the tables that
lack the epoch commit it.

Per epoch: one Spark query reads every source (:func:`spark_jobs.source_frames.collect_sources`), but the
Parquet and JSON-lines sources, which the driver reads from the epoch's files; when the driver reads every
source, no Spark query runs at all (:class:`~spark_jobs.driver_stream.DriverStream` lists the files and keeps
the checkpoint; an epoch with a malformed JSON line has Spark read that source's files, to set it aside).
The state tables' and mirrors' lookups are served from memory copies of what this process committed (read
from the tables once, on start, or again after an epoch whose commit failed or is unknown); on Iceberg the
state tables are append logs of the epochs' deltas (:class:`writers.graph_state.TableStateStore`).

Past ``[spark] driver_rows_max`` input rows a first batch is computed and written by the executors
(:mod:`spark_jobs.executors.graph_backfill`); a later one is reduced by Spark before the driver steps it, or
appended by the executors when the graph keeps no state (:mod:`spark_jobs.executors.graph_batches`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from lakeview.config.evolution import with_evolved_sources
from lakeview.errors import WriterError
from lakeview.graph import WEIGHT as GRAPH_WEIGHT
from lakeview.graph.output_types import conform, output_key, output_schema, table_schema
from lakeview.graph.overflow import checked_step
from lakeview.ivm.changefeed import normalize, source_mirror_name
from lakeview.ivm.commits import Change, CommitRecord, Epoch
from lakeview.project import evolving_inputs, graph_output_schema, source_schemas, view_graph
from lakeview.sql.dag import upstreams_of
from lakeview.sql.dialects import sql_properties
from lakeview.sql.graph_plan import GraphPlan
from lakeview.sql.plan import WEIGHT
from lakeview.sql.planner import view_plan
from spark_jobs import faults
from spark_jobs.driver_stream import DriverStream
from spark_jobs.epoch_guard import guarded
from spark_jobs.executors.graph_backfill import backfill_on_executors, backfills, bound_grown, bound_memory
from spark_jobs.executors.graph_batches import later_large, later_on_executors, warn_collected
from spark_jobs.graph_watermark import GraphWatermark
from spark_jobs.migrate import created_ms, rebuild_older_layout, stored_columns, stored_schema
from spark_jobs.source_frames import collect_sources, direct_sources, tagged_files
from spark_jobs.sources.evolution import evolved
from spark_jobs.sources.upstream import with_upstream_source
from spark_jobs.sources.view_changes import ChangePublisher
from spark_jobs.sources_pipeline import SourcesPipeline
from spark_jobs.streams import reconcile_checkpoint
from writers.graph_log import LAYOUT, StateLog, log_table_name
from writers.graph_mirrors import CLUSTERED, SourceMirrors, mirror_schema, shared_sides
from writers.graph_state import TableStateStore, commit_key, state_table_name, warm_up
from writers.graph_view import REPLACE_ROWS, ViewRows, small

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakeview.config.models import ProjectConfig
    from lakeview.graph import Graph
    from writers.base import SnapshotWriter
    from writers.iceberg.group import IcebergGroupWriter

log = logging.getLogger("lakeview.pipeline")


class GraphPipeline(SourcesPipeline):
    """Keeps one graph view fresh: ``prepare()`` once, then ``start()`` (the surface of
    :class:`~spark_jobs.sources_pipeline.SourcesPipeline`)."""

    persist_batch = False  # the batch is read by one query (collect_sources)

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
        self.evolving = evolving_inputs(project, view)  # new_columns = "evolve" sources the view's * selects
        if self.evolving:
            project = with_evolved_sources(project, self.evolving)  # as evolved so far
        self.publisher = ChangePublisher.for_view(project, view, writer)  # None unless other views read this one
        project = with_upstream_source(spark, project, view)  # each upstream view: a source over its change files
        plan = view_plan(project, view)
        assert isinstance(plan, GraphPlan)
        super().__init__(spark, project, view, plan, writer, on_commit, state_writer)
        self.plan: GraphPlan = plan
        self.feeds = {s: c.changes for s, c in self.configs.items() if c.changes is not None}
        self.schemas = source_schemas(project, plan.sources)
        self.direct = direct_sources(self.configs, self.quarantines, self.schemas)  # read by the driver, not Spark
        self.graph: Graph = view_graph(project, view)
        self.watermark = GraphWatermark.of(project, view, plan.sources, self.quarantines)  # late rows: quarantined
        self.mirrors: dict[str, SnapshotWriter] = {}
        self.mirror_store: SourceMirrors | None = None  # the mirrors' rows, served from memory (see the store)
        self.state: dict[str, SnapshotWriter] = {}
        self.store: TableStateStore | None = None
        self.group: IcebergGroupWriter | None = None
        self.view_rows: ViewRows | None = None  # the view's table, held in memory while small (see ViewRows)
        self._last_committed: int | None = None  # the last epoch this process committed (Iceberg: no reload)
        self.staged = False  # a view group's member: its commits are held for the group's transaction
        self._streamed = {s: self.configs[s].schema_ for s in self.evolving}  # what Spark's stream reads

    # --- tables ------------------------------------------------------------------------------
    def output_schema(self) -> pa.Schema:
        return graph_output_schema(self.project, self.view)

    def prepare(self) -> None:
        """Create the view's, its state tables' and its mirrors' tables; reconcile Spark's checkpoint;
        point the graph's state at the tables."""
        self.prepare_tables()
        group = None
        if self.writer.capabilities.multi_table_transactions:
            from writers.iceberg.group import IcebergGroupWriter  # lazy: Iceberg's group loads only where used

            members = {w.table_name: w for w in self.tables()}
            group = IcebergGroupWriter(
                self.writer.catalog,  # type: ignore[attr-defined]
                self.view,
                members,  # type: ignore[arg-type]
                {name: self.view for name in members},
            )
        self.attach(group)
        reconcile_checkpoint(self.view, self.checkpoint, self.last_epoch(), lambda: created_ms(self.writer))
        # a restart: the state exists, so no operator starts it again (a global aggregate's row is in the view)
        self.graph.runtime.epoch = 0 if self.last_epoch() is None else 1
        self.publish_changes()  # epochs committed before a crash, not yet published

    def prepare_tables(self) -> None:
        """Create the view's, its state tables' and its mirrors' tables and the state store over them (a view
        group's member: the group then reconciles its one checkpoint and gives it its transaction, ``attach``)."""
        for source in self.sources:
            self.project.source_path(source).mkdir(parents=True, exist_ok=True)
        if self.store is None:  # the first time (not an evolving view's new columns)
            rebuild_older_layout(self)  # a view an older Lakeview kept in tables this version never reads
        output, state_schemas = warm_up(self.graph)
        self._state_schemas = state_schemas
        properties = {"lakeview.sql": self.config.sql, "lakeview.cadence": str(self.config.cadence)}
        properties.update(sql_properties(self.config.sql, self.config.dialect))
        # Spark's types and the rows' unique key (else a multiset keyed by the whole row), as the one-source stack
        typed = output_schema(self.graph, output, self.schemas)
        self._unique = output_key(self.graph, {source: tuple(feed.key) for source, feed in self.feeds.items()})
        self._ensure(self.writer, typed, self._unique if self._unique is not None else tuple(typed.names), properties)
        self._output = table_schema(typed, stored_schema(self.writer))  # an existing table keeps its types
        owned = {"lakeview.state-of": self.view}
        mirror_keys = {source: tuple(feed.key) for source, feed in self.feeds.items()}
        judged = self.watermark.source if self.watermark is not None else None  # its mirror holds late images
        shared = shared_sides(self.graph, {s: k for s, k in mirror_keys.items() if s != judged})  # kept once, there
        self._mirror_keys, self._shared = mirror_keys, shared
        keys = {table.name: table.key for table in self.graph.state_tables() if table.name not in shared}
        kept = {name: schema for name, schema in state_schemas.items() if name not in shared}
        log = None
        if self.writer.capabilities.multi_table_transactions and keys:  # Iceberg: every state in one log table
            log, packing = self._state_writer(log_table_name(self.view)), StateLog(kept)
            self._ensure(log, packing.schema, None, {**owned, LAYOUT: packing.layout}, {LAYOUT: packing.layout})
            self.state = {log.table_name: log}
        else:
            for table in self.graph.state_tables():
                if table.name in shared:
                    continue
                writer = self._state_writer(state_table_name(self.view, table))
                self._ensure(writer, state_schemas[table.name], commit_key(table, state_schemas[table.name]), owned)
                self.state[table.name] = writer
        iceberg = self.writer.capabilities.format == "iceberg"  # mirrors in small row groups, looked up by range
        mirrored = {**owned, **(CLUSTERED if iceberg else {})}
        for source, feed in self.feeds.items():
            self.mirrors[source] = self._state_writer(source_mirror_name(self.view, source))
            self._ensure(self.mirrors[source], mirror_schema(self.schemas[source]), tuple(feed.key), mirrored)
        writers = {name: log for name in keys} if log is not None else self.state
        self.store = TableStateStore(keys, writers, kept, log=log)  # type: ignore[arg-type]
        self.graph.use_store(self.store)

    def attach(self, group: IcebergGroupWriter | None) -> None:
        """Commit every epoch's tables through ``group`` (one catalog transaction; None: Delta, table by table),
        then hold what fits in memory and check the tables hold this graph's state."""
        self.group = group
        rows_max = min(REPLACE_ROWS, self.project.spark.driver_keys_max)  # past [spark] driver_keys_max: not held
        held = self.group is not None and small(self.writer, rows_max)
        # a table holding the rows an older layout left, kept for readers during a rebuild (spark_jobs.migrate): its
        # first epoch replaces them in one commit, so readers see the old rows or the new, never a mix
        replaces = self.writer.at_baseline()
        self.view_rows = ViewRows(
            self.writer, tuple(self.graph.names), self._output, held, self._unique, rows_max, replaces
        )
        self.mirror_store = SourceMirrors(
            self.mirrors, self._mirror_keys, self.schemas, append_log=self.group is not None
        )
        self.store.borrowed = {
            name: (self.mirror_store.store, self.mirror_store.tables[source], columns, self._state_schemas[name])
            for name, (source, columns) in self._shared.items()
        }
        self._check_same_graph(self._state_schemas)
        bound_memory(self)  # tables past [spark] driver_keys_max rows: looked up by key, never held
        if self.watermark is not None:  # the watermark as the last committed epoch left it
            self.watermark.recover(self.tables())

    def _check_same_graph(self, state_schemas: dict[str, pa.Schema]) -> None:
        """Refuse state tables another version of the view's operator graph made (other operators, e.g. before
        eager aggregation, or other column names, e.g. before its own columns took the ``__lv_`` prefix, or
        another layout, e.g. one table per operator before the Iceberg log): a state table with other columns,
        or (Iceberg: its members commit together) a view table with commits beside a state table with none,
        means the state never saw the earlier epochs. A change feed's mirror without the weight column was kept
        one row per key (before mirrors became Z-set state like the operators')."""
        if self.group is not None and self.writer.last_commit() is None:
            kept = sorted(w.table_name for w in (*self.state.values(), *self.mirrors.values()) if w.last_commit())
            if kept:  # the view's table was dropped (a rebuild) and its state kept: the state is of the old table
                raise WriterError(
                    f"{self.view}: its table has no commits but its state table(s) {', '.join(kept)} hold the state "
                    "of earlier epochs (the view's table was dropped?); drop them too to rebuild the view from its "
                    "sources"
                )
        if (self.writer.last_commit() if self.group is not None else self.last_epoch()) is None:
            return
        assert self.store is not None
        if self.store.log is not None:
            expected = {self.store.log.table_name: set(self.store.packing.schema.names)}
        else:
            expected = {name: set(state_schemas[name].names) for name in self.state}
        alien = []
        for name, writer in self.state.items():
            never = self.group is not None and writer.last_commit() is None
            other = writer is self.store.log and writer.table().properties.get(LAYOUT) != self.store.packing.layout  # type: ignore[attr-defined]
            if never or other or stored_columns(writer) != expected[name]:
                alien.append(writer.table_name)
        alien += [w.table_name for w in self.mirrors.values() if GRAPH_WEIGHT not in stored_columns(w)]
        if alien:
            tables = sorted({*alien, *self._older_state_tables()})
            raise WriterError(
                f"{self.view}: its state table(s) {', '.join(tables)} do not hold the state of the view's "
                "operator graph as this version compiles it (made by another version, or new); drop the view's "
                "table and its __lv_state_ tables to rebuild it from its sources"
            )

    def _older_state_tables(self) -> list[str]:
        """Iceberg: the view's per-operator state tables an earlier version kept beside the view (before its
        state took one log table), which this version never reads."""
        if self.group is None:
            return []
        namespace, _ = self.writer.identifier  # type: ignore[attr-defined]
        prefix, log = f"__lv_state_{self.view}_g_", log_table_name(self.view)
        names = [identifier[-1] for identifier in self.writer.catalog.list_tables(namespace)]  # type: ignore[attr-defined]
        return [name for name in names if name.startswith(prefix) and name != log]

    def tables(self) -> list[SnapshotWriter]:
        """The view's table, its state tables and its mirrors."""
        return [self.writer, *self.state.values(), *self.mirrors.values()]

    def last_epoch(self) -> int | None:
        """The newest epoch the view has committed: Iceberg, every table's (they move together);
        Delta, the newest any of its tables holds (an epoch with no change to the view commits only
        state)."""
        if self.group is not None:
            return self.group.last_epoch()
        epochs = [r.epoch for w in self.tables() if (r := w.last_commit()) is not None]
        return max(epochs) if epochs else None

    def publish_changes(self) -> None:
        """Publish the committed epochs' changes for the views reading this one (lakeview.view_changes)."""
        if self.publisher is not None:
            self.publisher.publish()

    # --- streaming (SourcesPipeline's surface; its hooks below) ---------------------------------
    def start(self, available_now: bool = False) -> StreamingQuery | DriverStream:
        """Start the view's epochs: without Spark when the driver reads every source itself
        (:class:`~spark_jobs.driver_stream.DriverStream`), else Spark's streaming query."""
        if len(self.direct) < len(self.sources):
            return super().start(available_now)
        faults.install(self)  # type: ignore[arg-type]
        name = f"lakeview_{self.view}"
        return DriverStream(
            name,
            self.checkpoint,
            [self.project.source_path(s) for s in self.sources],
            guarded(name, self._process),
            self.config.cadence.seconds or 0.0,
            once=available_now or self.config.cadence.is_manual,
            max_files=self.project.spark.max_files_per_trigger,
        ).start()

    def _done(self, epoch_id: int) -> bool:
        """Whether the epoch is committed: Iceberg, in every table (one transaction); Delta, in the view's
        table (committed last; an epoch that left the view unchanged is recomputed, reading the tables
        that hold it as they stood before it, and changes nothing)."""
        if self.group is not None and self._last_committed is not None and epoch_id > self._last_committed:
            return False  # every epoch before it went through this process (the group's commit checks again)
        if self.group is not None:
            done = self.group.last_epoch()
        else:
            record = self.writer.last_commit()
            done = record.epoch if record is not None else None
        return done is not None and epoch_id <= done

    def _before(self, epoch_id: int) -> dict[str, int]:
        """Delta: each state table and mirror that already holds ``epoch_id`` (a crash between the epoch's
        commits), by the version it stood at before it."""
        if self.group is not None:
            return {}
        found = {}
        for name, writer in [*self.state.items(), *self.mirrors.items()]:
            record = writer.last_commit()
            if record is not None and record.epoch >= epoch_id and record.snapshot_id is not None:
                found[name] = record.snapshot_id - 1
        return found

    def _after_batch(self, epoch_id: int) -> None:
        log.info("%s: epoch %s timings %s", self.view, epoch_id, {k: round(v, 3) for k, v in self.timings.items()})
        faults.point("before_publish", epoch_id)
        self.publish_changes()

    def _process_batch(self, batch: DataFrame, epoch_id: int) -> CommitRecord | None:
        if self.evolving:
            batch = self._evolve(batch, epoch_id)
        if backfills(self, batch, epoch_id):  # a large first batch: computed by Spark, written by the executors
            return backfill_on_executors(self, batch, epoch_id)
        if later_large(self, epoch_id):  # a large later batch: reduced by Spark before the driver sees it
            return later_on_executors(self, batch, epoch_id)
        started = time.perf_counter()
        reached, newest_ms, _ = self.epoch_frontier(epoch_id)
        direct = {s: (self._batch_paths.get(s, []), self._file_schema(s)) for s in self.direct}
        split = collect_sources(
            batch, self.view, self.sources, self.configs, self.quarantines, epoch_id, direct, self.spark
        )
        epoch = self._epoch_of(epoch_id, reached, newest_ms, split.rows_in, split.quarantined)
        inputs = split.tables
        if self.watermark is not None:  # the event source's late rows: quarantined, counted, left out
            epoch, inputs = self.watermark.apply(epoch, inputs)
        self.timings = {"spark_read_quarantine_s": time.perf_counter() - started}
        self.last_write = {"by": "driver", "rows_collected": sum(t.num_rows for t in inputs.values())}
        warn_collected(self, epoch, self.last_write["rows_collected"], "collected as they came")
        return self.step_and_commit(epoch, inputs)

    def step_and_commit(
        self,
        epoch: Epoch,
        inputs: dict[str, pa.Table],
        given: dict[str, pa.Table] | None = None,
        partials: dict[str, pa.Table] | None = None,
    ) -> CommitRecord | None:
        """Step the graph over the epoch's collected ``inputs`` (``given``, ``partials``: what Spark reduced, see
        :func:`lakeview.graph.step`) and commit every table's change."""
        epoch_id = epoch.number
        started = time.perf_counter()
        before = self._before(epoch_id)
        assert self.store is not None and self.view_rows is not None
        self.store.begin({name: v for name, v in before.items() if name in self.state})
        self.view_rows.begin()
        deltas = self._zsets(inputs, before)
        if self.watermark is not None:  # a change feed's late images: left out of its Z-set (not of its mirror)
            epoch, deltas = self.watermark.judge_zset(epoch, deltas)
        # a table only an unused CTE names is a source of the view (its SQL names it) but no input of its graph
        deltas = {source: delta for source, delta in deltas.items() if source in self.graph.schemas}
        out = checked_step(self.view, self.graph, deltas, given, partials)  # an aggregate's overflow named
        if self.watermark is not None:  # state only closed windows reach: dropped in this epoch's commit
            self.watermark.expire(self.graph)
        self.timings["graph_step_s"] = time.perf_counter() - started
        started = time.perf_counter()
        weighted = conform(out.rename_columns([*out.column_names[:-1], WEIGHT]), self._output, self.view)
        changes: dict[str, Change] = {self.writer.table_name: self.view_rows.change(weighted)}
        changes.update(self.store.table_changes())
        changes.update(self.mirror_store.changes())
        record = self._commit(epoch, changes)
        if not self.staged:  # a view group's member: its tables hold the epoch once the group commits it
            self.took(epoch.number)
        self.timings["commit_s"] = time.perf_counter() - started
        return record

    # --- new_columns = "evolve": the view's * follows its sources' new columns ---------------------
    def _evolve(self, batch: DataFrame | None, epoch_id: int) -> DataFrame | None:
        """Add the epoch's new input columns to the sources the view's ``*`` selects, and with them to the graph
        (re-compiled: its ``*`` re-expanded), the view's table, a join side's state and a change feed's mirror
        (rows committed before read NULL for them); ``batch`` read again when Spark's stream (its schema fixed
        when it started) lacks them. What cannot follow is refused at load (:mod:`lakeview.graph.evolve`)."""
        _, _, paths = self.epoch_frontier(epoch_id)
        project = evolved(self.spark, self.project, self.evolving, paths, epoch_id, self.view)
        if project is not self.project:
            self.project = project
            self.configs = {s: project.sources[s] for s in self.sources}
            for source in self.evolving:
                self.quarantines[source].config = self.configs[source]
            self.schemas = source_schemas(project, self.sources)
            self.direct = direct_sources(self.configs, self.quarantines, self.schemas)
            runs, self.graph = self.graph.runtime.epoch, view_graph(project, self.view)
            self.prepare_tables()  # the new columns added to every table holding them, the state store made again
            self.graph.runtime.epoch = runs  # (after its warm-up epoch) the state exists: no operator starts it again
            if self.group is not None:  # its tables as its last transaction left them lack the columns: load them
                self.group._after_commit = {}
            self.attach(self.group)  # the view's rows and the mirrors held again, with the new columns
        stale = [s for s in self.evolving if s not in self.direct and self.configs[s].schema_ != self._streamed[s]]
        if batch is None or not stale:
            return batch
        spark_read = {s: paths.get(s, []) for s in self.sources if s not in self.direct}
        return tagged_files(self.spark, self.sources, self.quarantines, spark_read)

    def _ensure(
        self,
        writer: SnapshotWriter,
        schema: pa.Schema,
        key: tuple[str, ...] | None,
        properties: dict[str, str],
        evolved: dict[str, str] | None = None,
    ) -> None:
        """Create ``writer``'s table; an evolving view's gains the columns its graph has now (a restart after the
        source evolved, or the epoch that evolved it: ``evolved``, the properties that name them, set with them)."""
        writer.ensure_table(schema, key, properties)
        if self.evolving and (added := writer.add_columns(schema, evolved)):
            log.warning(
                "%s: columns %s added to %s (its * selects an evolving source)", self.view, added, writer.table_name
            )

    def took(self, epoch_id: int) -> None:
        """The tables hold the epoch: the memory copies take its changes."""
        assert self.store is not None and self.view_rows is not None and self.mirror_store is not None
        self.store.committed()
        self.view_rows.committed()
        self.mirror_store.committed()
        self._last_committed = epoch_id
        bound_grown(self)  # a table grown past [spark] driver_keys_max rows: looked up by key from now on

    def _file_schema(self, source: str) -> pa.Schema:
        """A source's columns as its files hold them: an upstream view's change files add each row's weight."""
        if source in self.upstreams:
            return self.schemas[source].append(pa.field(WEIGHT, pa.int32()))
        return self.schemas[source]

    def _zsets(self, inputs: dict[str, pa.Table], before: dict[str, int]) -> dict[str, pa.Table]:
        """Each source's epoch as a Z-set with the graph's weight column; a change feed's against its mirror,
        which takes the Z-set (``before``: mirrors holding the epoch already, read at that version)."""
        assert self.mirror_store is not None
        self.mirror_store.begin({s: v for s, v in before.items() if s in self.mirrors})
        deltas: dict[str, pa.Table] = {}
        for source, batch in inputs.items():
            columns = self.schemas[source].names
            if source in self.feeds:
                feed = self.feeds[source]
                old = self.mirror_store.old(source, batch.select(list(feed.key)))
                batch, _ = normalize(batch, old, feed, columns)
            weight = batch.column(WEIGHT).cast(pa.int64())
            deltas[source] = batch.select(columns).append_column(GRAPH_WEIGHT, weight)
            if source in self.feeds:
                self.mirror_store.apply(source, deltas[source])  # the mirror's Z-set: old images -1, new +1
        return deltas

    def _commit(self, epoch: Epoch, changes: dict[str, Change]) -> CommitRecord | None:
        """Every table's change for the epoch: one catalog transaction (Iceberg), or the state tables and
        mirrors first and the view's table last (Delta)."""
        if self.group is not None:
            faults.point("before_view_commit", epoch.number)  # Iceberg: before the one transaction of every table
            records = self.group.commit(epoch, changes)  # type: ignore[arg-type]
            return None if records is None else records.get(self.writer.table_name)
        view_change = changes.pop(self.writer.table_name)
        for writer in [*self.state.values(), *self.mirrors.values()]:
            change = changes.get(writer.table_name)
            if change is not None:
                writer.commit(epoch, change)
        return self.writer.commit(epoch, view_change)
