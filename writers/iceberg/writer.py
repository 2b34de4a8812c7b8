"""Iceberg v2 snapshots committed through Lakeview's REST catalog (pyiceberg).

Keyed changes are merge-on-read by default (table property ``write.update.mode``): the new rows
are appended as a data file and the stored rows they replace are named, by file and position,
in one position-delete file (:mod:`writers.iceberg.position_deletes`), found in the rows kept in memory
across epochs (:mod:`writers.iceberg.live_files`). Nothing already written is rewritten, so a commit
costs what the change costs; maintenance folds the deletes back into the data files.

With ``write.update.mode = copy-on-write`` the data files that may hold a changed key (found by
pyiceberg's manifest and column-stats pruning) are rewritten instead. Either way an epoch is
ONE snapshot, so time travel never shows a half-applied epoch. Appends are one ``append``
snapshot.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    ServerError,
    ServiceUnavailableError,
    ValidationException,
)
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThanOrEqual,
    Or,
)
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import UpdateSnapshot, _OverwriteFiles

from lakeview.errors import CatalogUnavailableError, CommitConflictError, StorageError, WriterError
from lakeview.ivm.commits import BASELINE, Change, CommitRecord, Epoch
from writers.arrow_ops import rows_at_most, rows_with_keys, rows_without_keys
from writers.base import SnapshotWriter, WriterCapabilities, retry_commit
from writers.iceberg.live_files import Found, LiveFiles
from writers.iceberg.metadata_memo import arrow_schema as arrow_schema_of
from writers.iceberg.metadata_memo import transaction
from writers.iceberg.position_deletes import row_delta, write_position_deletes
from writers.maintenance import MAINTENANCE, MaintenancePolicy
from writers.staged_files import WrittenFile, append_iceberg_files

log = logging.getLogger("lakeview.writers.iceberg")
UPDATE_MODE = "write.update.mode"  # Iceberg's table property: merge-on-read (Lakeview's default) or copy-on-write
MERGE_ON_READ = "merge-on-read"
KEY_PROPERTY = "lakeview.key"  # a keyed view's key columns, on its table


def merge_on_read(table: Table) -> bool:
    """Whether keyed commits to ``table`` write position deletes (else they rewrite files)."""
    return table.properties.get(UPDATE_MODE, MERGE_ON_READ) == MERGE_ON_READ


def last_commit_of(table: Table) -> CommitRecord | None:
    """The newest Lakeview commit recorded in a table's snapshot history (walking parents); None past a
    baseline (its rows are from before the view's epochs: :data:`~lakeview.ivm.commits.BASELINE`)."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if BASELINE in props:
            return None
        record = CommitRecord.from_properties(props, snapshot.snapshot_id)
        if record is not None:
            return record
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return None


class IcebergWriter(SnapshotWriter):
    capabilities = WriterCapabilities(
        format="iceberg", catalog_commits=True, executor_writes=True, executor_reads=True, schema_evolution=True,
        snapshot_changes=True, merge_on_read=True, multi_table_transactions=True, closed_window_reads=True,
    )  # fmt: skip

    def __init__(
        self, catalog: Catalog, namespace: str, name: str, compaction: MaintenancePolicy | None = None
    ) -> None:
        self.catalog = catalog
        self.identifier = (namespace, name)
        # Data files the last lookup read, by (path, schema id): files are immutable, so the
        # commit that follows a lookup rewrites them without reading them again.
        self._files_read: dict[tuple[str, int], pa.Table] = {}
        self.live = LiveFiles()  # merge-on-read: the table's rows by file and position, across epochs
        # merge-on-read: when a commit also compacts (the view's [maintenance] thresholds)
        self.compaction = compaction or MaintenancePolicy()
        self.timings: dict[str, float] = {}  # the last lookup's and commit's phases (seconds), for logs and bench/
        # The table as this process's last commit left it (a group's member: IcebergGroupWriter), for lookups
        # without a catalog round trip; None (or it returns None): load the table.
        self.committed_table: Callable[[], Table | None] | None = None

    @property
    def table_name(self) -> str:
        return self.identifier[-1]

    def ensure_table(self, schema: pa.Schema, key: tuple[str, ...] | None, properties: dict[str, str]) -> None:
        try:
            self.catalog.create_namespace(self.identifier[0])
        except NamespaceAlreadyExistsError:
            pass
        # Every column optional: merged values from DuckDB are nullable whatever Spark inferred.
        nullable = pa.schema([f.with_nullable(True) for f in schema])
        # A short metadata log: older metadata files fall out of it and maintenance removes them.
        props = {"format-version": "2", "write.metadata.previous-versions-max": "20", **properties}
        if key is not None:
            props[KEY_PROPERTY] = ",".join(key)
            props = {
                "write.delete.mode": MERGE_ON_READ,
                UPDATE_MODE: MERGE_ON_READ,
                "write.merge.mode": MERGE_ON_READ,
                **props,
            }
        self.catalog.create_table_if_not_exists(self.identifier, schema=nullable, properties=props)

    def add_columns(self, schema: pa.Schema, properties: dict[str, str] | None = None) -> list[str]:
        table = self.table()
        known = {f.name.lower() for f in table.schema().fields}
        new = [f.with_nullable(True) for f in schema if f.name.lower() not in known]
        changed = {k: v for k, v in (properties or {}).items() if table.properties.get(k) != v}
        if new or changed:
            with table.transaction() as txn:  # the columns and the properties naming them: one commit
                if new:
                    with txn.update_schema() as update:
                        update.union_by_name(pa.schema(new))
                if changed:
                    txn.set_properties(changed)
        return [f.name for f in new]

    def table(self) -> Table:
        """The table as the catalog has it now. Raises WriterError when it does not exist and
        CatalogUnavailableError (transient) when the catalog answers 5xx, e.g. while its store restarts."""
        try:
            return self.catalog.load_table(self.identifier)
        except NoSuchTableError as exc:
            raise WriterError(f"view table {'.'.join(self.identifier)} does not exist") from exc
        except (ServiceUnavailableError, ServerError) as exc:
            raise CatalogUnavailableError(f"loading {'.'.join(self.identifier)}: {exc}") from exc

    def last_commit(self) -> CommitRecord | None:
        return last_commit_of(self.table())

    def drop(self) -> None:
        try:
            self.catalog.purge_table(self.identifier)  # the catalog deletes the files its metadata lists
        except NoSuchTableError:
            pass
        self.live = LiveFiles()  # rows by file of the dropped table
        self._files_read = {}

    def baseline(self) -> None:
        table = self.table()
        if table.current_snapshot() is None or self.at_baseline():
            return
        txn = transaction(table)
        with txn.update_snapshot(snapshot_properties={BASELINE: self.table_name}).fast_append():
            pass  # a snapshot of the same files: readers see the same rows
        txn.commit_transaction()

    def at_baseline(self) -> bool:
        current = self.table().current_snapshot()
        return current is not None and current.summary is not None and BASELINE in current.summary.additional_properties

    def lookup(self, keys: pa.Table) -> pa.Table:
        started = time.perf_counter()
        table = (self.committed_table() if self.committed_table is not None else None) or self.table()
        key = tuple(keys.column_names)
        if merge_on_read(table) or self._distributed(table):
            found = self.live.find(table, keys, key)
            self.timings = {
                "lookup_s": time.perf_counter() - started,
                "lookup_files_read": found.files_read,
                "lookup_indexed": found.indexed,
                "index_builds": self.live.index_builds,
            }
            return found.rows
        scan = table.scan(row_filter=_key_filter(keys, key))
        tasks = list(scan.plan_files())
        self._files_read = {}
        if any(task.delete_files for task in tasks):
            stored = scan.to_arrow()  # not written by Lakeview: let pyiceberg apply the deletes
        else:
            reader = ArrowScan(
                table_metadata=table.metadata, io=table.io, projected_schema=table.schema(), row_filter=AlwaysTrue()
            )
            schema_id = table.schema().schema_id
            parts = [reader.to_table(tasks=[task]) for task in tasks]
            self._files_read = {(task.file.file_path, schema_id): part for task, part in zip(tasks, parts)}
            stored = pa.concat_tables(parts) if parts else reader.to_table(tasks=[])
        found = rows_with_keys(stored, keys, key)
        self.timings = {
            "lookup_s": time.perf_counter() - started,
            "lookup_files": len(tasks),
            "lookup_rows_read": stored.num_rows,
        }
        return found

    def rows_ending_by(self, column: str, bound_us: int) -> pa.Table:
        """Rows whose timestamp ``column`` is at or before ``bound_us`` (windows a watermark closed)."""
        stored = self.table().scan(row_filter=LessThanOrEqual(column, int(bound_us))).to_arrow()
        return rows_at_most(stored, column, bound_us)

    def commit(self, epoch: Epoch, change: Change) -> CommitRecord | None:
        return self._commit_retrying(
            epoch, lambda table: None if change.is_empty else self._commit_once(table, epoch, change)
        )

    def commit_files(self, epoch: Epoch, files: list[WrittenFile]) -> CommitRecord | None:
        """Append data files written by Spark's executors as ONE snapshot stamped with ``epoch``."""
        return self._commit_retrying(epoch, lambda table: append_iceberg_files(table, epoch, files) if files else None)

    def _commit_retrying(self, epoch: Epoch, once: Callable[[Table], CommitRecord | None]) -> CommitRecord | None:
        def attempt() -> CommitRecord | None:
            try:
                table = self.table()
                last = last_commit_of(table)
                if last is not None and epoch.number <= last.epoch:
                    log.info("%s: epoch %s already committed (last %s); skipping", epoch.view, epoch.number, last.epoch)
                    return None
                return once(table)
            except (CommitFailedException, ValidationException) as exc:
                # ValidationException: pyiceberg's own retry found a concurrent snapshot (e.g. a
                # compaction) that added files the overwrite must see; redo from a fresh read.
                raise CommitConflictError(f"{epoch.view}: epoch {epoch.number} lost a commit race: {exc}") from exc
            except (OSError, CommitStateUnknownException, ServerError, ServiceUnavailableError) as exc:
                # Storage or catalog failure: the pointer did not move (or, if it did, the epoch
                # check above skips the retry). Files written by the failed attempt are orphans.
                raise StorageError(f"{epoch.view}: epoch {epoch.number} failed: {exc}") from exc

        return retry_commit(epoch, attempt)

    def _commit_once(self, table: Table, epoch: Epoch, change: Change) -> CommitRecord:
        started = time.perf_counter()
        txn, properties = self.stage(table, epoch, change)
        staged = time.perf_counter()
        committed = txn.commit_transaction()
        self.timings.update(stage_s=staged - started, catalog_commit_s=time.perf_counter() - staged)
        current = committed.current_snapshot()
        return CommitRecord.from_properties(properties, current.snapshot_id if current else None)  # type: ignore[return-value]

    def stage(self, table: Table, epoch: Epoch, change: Change) -> tuple[Transaction, dict[str, str]]:
        """Write the epoch's data files and stage its snapshot in a transaction, uncommitted
        (the group writer commits several staged tables in one catalog transaction)."""
        arrow_schema = arrow_schema_of(table)
        rows = change.rows.select(arrow_schema.names).cast(arrow_schema)
        commit_uuid = uuid.uuid4()
        if change.key is not None and table.current_snapshot() is not None and merge_on_read(table):
            return self._stage_merge_on_read(table, epoch, change, rows, commit_uuid)
        if change.key is not None and table.current_snapshot() is not None and self._distributed(table):
            return self._stage_rewrite_on_executors(table, epoch, change, rows, commit_uuid)
        replaced: list = []
        deleted = 0
        if change.key is not None and table.current_snapshot() is not None:
            keys = change.touched_keys()
            for task in table.scan(row_filter=_key_filter(keys, change.key)).plan_files():
                if task.delete_files:
                    raise WriterError(
                        f"{epoch.view}: data file {task.file.file_path} has delete files; not written by Lakeview"
                    )
                stored = self._files_read.pop((task.file.file_path, table.schema().schema_id), None)
                if stored is None:
                    stored = ArrowScan(
                        table_metadata=table.metadata,
                        io=table.io,
                        projected_schema=table.schema(),
                        row_filter=AlwaysTrue(),
                    ).to_table(tasks=[task])
                kept = rows_without_keys(stored, keys, change.key)
                if kept.num_rows == stored.num_rows:
                    continue  # stats said maybe; the file holds none of the keys
                deleted += stored.num_rows - kept.num_rows
                replaced.append(task.file)
                rows = pa.concat_tables([kept.cast(arrow_schema), rows])
        self._files_read = {}
        properties = CommitRecord.properties(epoch, inserted=change.rows.num_rows, deleted=deleted)
        # no rows left (a change that only deletes every row of the files it touches): no new file
        files = (
            list(_dataframe_to_data_files(table_metadata=table.metadata, df=rows, io=table.io, write_uuid=commit_uuid))
            if rows.num_rows
            else []
        )
        return _replacing(table, properties, replaced, files, commit_uuid), properties

    def _stage_merge_on_read(
        self, table: Table, epoch: Epoch, change: Change, rows: pa.Table, commit_uuid: uuid.UUID
    ) -> tuple[Transaction, dict[str, str]]:
        """New rows in a new data file, the rows they replace (and deleted keys' rows) named in
        one position-delete file: ONE snapshot, no existing file read or rewritten.

        Compaction happens here too, in the same snapshot, when thresholds are passed (see
        :meth:`LiveTable.to_rewrite`): the writer is the only one that can fold deletes while it commits
        every epoch (a separate compaction would race every commit and lose)."""
        assert change.key is not None
        found = self.live.find(table, change.touched_keys(), change.key)
        properties = CommitRecord.properties(epoch, inserted=change.rows.num_rows, deleted=found.rows.num_rows)
        live = self.live.live(table)
        touched = frozenset(pc.unique(found.positions.column("file_path")).to_pylist())
        rewrite, dropped = live.to_rewrite(self.compaction, touched)
        written, named = rows, found  # named: the replaced rows the delete file names (those outside rewritten files)
        rewritten: list[DataFile] = []  # a distributed table's files the executors rewrote
        if rewrite:
            gone = pa.array(sorted(f.file_path for f in rewrite), pa.string())
            in_rewrite = pc.is_in(found.positions.column("file_path"), value_set=gone)
            replaced = found.positions.filter(in_rewrite)
            named = Found(
                rows=found.rows.filter(pc.invert(in_rewrite)),
                positions=found.positions.filter(pc.invert(in_rewrite)),
                files_read=found.files_read,
            )
            if self.live.distributed(live):
                assert self.live.remote is not None  # the files are rewritten by the executors, not read here
                rewritten = self.live.remote.rewrite(table, live, rewrite, replaced)
            else:
                kept = [
                    self.live.rows_without(table, f, live.deletes.get(f.file_path, {}), replaced).cast(rows.schema)
                    for f in rewrite
                ]
                written = pa.concat_tables([*kept, rows])
        positions = named.positions
        files = (
            list(
                _dataframe_to_data_files(table_metadata=table.metadata, df=written, io=table.io, write_uuid=commit_uuid)
            )
            if written.num_rows
            else []
        )
        files += rewritten
        deletes = write_position_deletes(table, positions, commit_uuid) if positions.num_rows else None
        txn = transaction(table)
        operation = Operation.OVERWRITE if deletes is not None or rewrite else Operation.APPEND
        with row_delta(
            txn,
            {**properties, **({MAINTENANCE: f"compacted {len(rewrite)} file(s)"} if rewrite else {})},
            commit_uuid,
            operation,
        ) as delta:
            for data_file in [*files, *([deletes] if deletes is not None else [])]:
                delta.add(data_file)
            for data_file in [*rewrite, *dropped]:
                delta.remove(data_file)
        self.live.remember(table, files, written, deletes, named, found, rewrite)
        self.timings.update(
            files_read=found.files_read,
            indexed=found.indexed,
            index_builds=self.live.index_builds,
            position_deletes=positions.num_rows,
            files_rewritten=len(rewrite),
            delete_files_folded=len(dropped),
        )
        return txn, properties

    def _distributed(self, table: Table) -> bool:
        """Whether ``table`` is past the driver's bound (its live files read only when some
        remote reader is attached)."""
        return self.live.remote is not None and self.live.distributed(self.live.live(table))

    def _stage_rewrite_on_executors(
        self, table: Table, epoch: Epoch, change: Change, rows: pa.Table, commit_uuid: uuid.UUID
    ) -> tuple[Transaction, dict[str, str]]:
        """Copy-on-write on a table past the driver's bound: the files holding a changed key are
        written again by Spark's executors without those rows; the new rows go in their own file."""
        assert change.key is not None and self.live.remote is not None
        found = self.live.find(table, change.touched_keys(), change.key)
        live = self.live.live(table)
        touched = set(pc.unique(found.positions.column("file_path")).to_pylist())
        replaced = [f for f in live.data if f.file_path in touched]
        files = self.live.remote.rewrite(table, live, replaced, found.positions) if replaced else []
        files += (
            list(_dataframe_to_data_files(table_metadata=table.metadata, df=rows, io=table.io, write_uuid=commit_uuid))
            if rows.num_rows
            else []
        )
        properties = CommitRecord.properties(epoch, inserted=change.rows.num_rows, deleted=found.rows.num_rows)
        txn = _replacing(table, properties, replaced, files, commit_uuid)
        self.live.remember(table, files, rows, None, found, found, replaced)
        self.timings.update(files_read=found.files_read, files_rewritten=len(replaced))
        return txn, properties


class _LiveOverwrite(_OverwriteFiles):
    """pyiceberg's overwrite, minus manifests that hold no live file.

    pyiceberg 0.12 carries a manifest whose entries are all DELETED into every later snapshot, so
    with one copy-on-write overwrite per epoch the manifest list grows by one per commit and so
    does commit latency (measured: ~200 ms to ~700 ms over 60 commits). Java Iceberg drops them.
    """

    def _existing_manifests(self) -> list:
        return [
            m for m in super()._existing_manifests()
            if m.has_added_files() or m.has_existing_files() or m.added_snapshot_id == self._snapshot_id
        ]  # fmt: skip


def _replacing(
    table: Table, properties: dict[str, str], replaced: list[DataFile], files: list[DataFile], commit_uuid: uuid.UUID
) -> Transaction:
    """A transaction staging ONE snapshot that removes ``replaced`` and adds ``files`` (an
    append when nothing is replaced)."""
    txn = transaction(table)
    producer = txn.update_snapshot(snapshot_properties=properties)
    with _overwrite(producer, commit_uuid) if replaced else producer.fast_append() as snapshot:
        for data_file in replaced:
            snapshot.delete_data_file(data_file)
        for data_file in files:
            snapshot.append_data_file(data_file)
    return txn


def _overwrite(producer: UpdateSnapshot, commit_uuid: uuid.UUID) -> _OverwriteFiles:
    txn = producer._transaction
    return _LiveOverwrite(
        commit_uuid=commit_uuid,
        operation=Operation.OVERWRITE,
        transaction=txn,
        io=producer._io,
        branch=producer._branch,
        snapshot_properties=producer._snapshot_properties,
    )


def _key_filter(keys: pa.Table, key: tuple[str, ...]) -> BooleanExpression:
    """A pruning filter that matches at least every row with one of ``keys`` (maybe more)."""
    expression: BooleanExpression = AlwaysTrue()
    for name in key:
        values = keys.column(name).unique().to_pylist()
        present = [v for v in values if v is not None]
        term: BooleanExpression | None = None
        if len(present) > MAX_IN_VALUES and _orderable(present):
            # a range prunes as well on sorted/clustered files and costs nothing per value;
            # the callers filter the rows exactly afterwards
            term = And(GreaterThanOrEqual(name, min(present)), LessThanOrEqual(name, max(present)))
        elif present:
            term = In(name, present)
        if len(present) < len(values):
            term = Or(term, IsNull(name)) if term is not None else IsNull(name)
        if term is not None:
            expression = term if isinstance(expression, AlwaysTrue) else And(expression, term)
    return expression


MAX_IN_VALUES = 256  # past this, an IN filter costs more to evaluate than the rows it saves


def _orderable(values: list) -> bool:
    first = type(values[0])
    return first in (int, float, str) and all(type(v) is first for v in values)
