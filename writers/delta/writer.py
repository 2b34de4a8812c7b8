"""Delta Lake snapshots written with delta-rs (``deltalake``).

Keyed changes are ONE ``MERGE`` per epoch: the upserted rows and the deleted keys travel in one
source table with an operation column, matched on the key with ``IS NOT DISTINCT FROM`` (null
keys are keys). Append-only changes are one append. Every commit carries an app transaction
``(app_id=view, version=epoch)`` — the Delta-native idempotency marker — and Lakeview's
summary keys in its commit info, so a replayed epoch is a no-op and any reader of the log sees
the view, epoch, frontier, row counts and lag.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import (
    CommitFailedError,
    DeltaError,
    DeltaProtocolError,
    SchemaMismatchError,
    TableNotFoundError,
)

from lakeview.errors import CommitConflictError, StorageError, WriterError
from lakeview.ivm.commits import BASELINE, EPOCH, Change, CommitRecord, Epoch, Replacement
from writers.arrow_ops import plain_schema, plain_types, rows_with_keys, rows_without_keys
from writers.base import SnapshotWriter, WriterCapabilities, retry_commit
from writers.delta.log import commit_infos, iter_commit_infos
from writers.maintenance import filesystem_for
from writers.staged_files import ReplacingFiles, WrittenFile, append_delta_files

log = logging.getLogger("lakeview.writers.delta")
OP = "__lakeview_op"  # the operation column of a merge source: 'u' upsert, 'd' delete, 'i' insert
KEY_PROPERTY = "lakeview.key"


def record_of(entry: dict[str, Any]) -> CommitRecord | None:
    """The Lakeview commit recorded in one Delta history entry (commit info), if any."""
    props = {k: str(v) for k, v in entry.items() if k.startswith("lakeview.")}
    return CommitRecord.from_properties(props, entry.get("version"))


def history_of(table: DeltaTable, limit: int | None = None) -> list[CommitRecord]:
    """Lakeview's commits among the newest ``limit`` versions of a Delta table's log as loaded,
    newest first (commit files still present)."""
    return [r for r in (record_of(e) for e in commit_infos(table, limit)) if r is not None]


def last_commit_of(table: DeltaTable) -> CommitRecord | None:
    """The newest Lakeview commit of a Delta table as loaded, with the version it was committed as.

    The commit info of that commit gives the epoch and the frontier. If the log was cleaned past
    that commit, the epoch is still known (from the checkpoint's app transaction) but the frontier
    is not. Raises OSError when the log cannot be read.
    """
    for entry in iter_commit_infos(table):
        if BASELINE in entry:  # the rows are from before the view's epochs (see DeltaWriter.baseline)
            return None
        record = record_of(entry)
        if record is not None:
            return record
    view = table.metadata().name or ""
    epoch = table.transaction_version(view) if view else None
    if epoch is None or epoch < 0:  # (a baseline's app transaction: no epoch yet)
        return None
    return CommitRecord(view=view, epoch=epoch, frontier={}, snapshot_id=table.version(), committed_at_ms=0)


class DeltaWriter(SnapshotWriter):
    """Writes one view's Delta table at ``location`` (a path or ``s3://bucket/prefix/...``)."""

    # delta-rs's MERGE rewrites the files it touches (no deletion vectors); Delta has no multi-table
    # transaction; its lookups stream through deltalake's scanner, so nothing to read on executors.
    capabilities = WriterCapabilities(
        format="delta", executor_writes=True, schema_evolution=True, snapshot_changes=True
    )

    def __init__(self, location: str, view: str, storage_options: dict[str, str] | None = None) -> None:
        self.location = location
        self.view = view
        self.storage_options = storage_options or None
        self._current: DeltaTable | None = None

    @property
    def table_name(self) -> str:
        return self.view

    def ensure_table(self, schema: pa.Schema, key: tuple[str, ...] | None, properties: dict[str, str]) -> None:
        if DeltaTable.is_deltatable(self.location, storage_options=self.storage_options):
            return
        # Every column nullable: merged values are nullable whatever Spark inferred. Delta stores a timestamp
        # with a time zone as UTC only: DuckDB's (an operator graph's state) says "Etc/UTC", the same instants.
        nullable = pa.schema([_utc(f).with_nullable(True) for f in schema])
        # Delta's table configuration only takes keys it can parse; Lakeview's go in the
        # create commit's info.
        meta = dict(properties)
        if key is not None:
            meta[KEY_PROPERTY] = ",".join(key)
        try:
            DeltaTable.create(
                self.location,
                schema=nullable,
                mode="ignore",
                name=self.view,
                storage_options=self.storage_options,
                commit_properties=CommitProperties(custom_metadata=meta),
            )
        except DeltaError as exc:
            raise WriterError(f"{self.view}: cannot create the Delta table at {self.location}: {exc}") from exc

    def add_columns(self, schema: pa.Schema, properties: dict[str, str] | None = None) -> list[str]:
        from deltalake.schema import Field as DeltaField  # lazy: deltalake loads only for Delta tables

        table = self.table()
        known = {name.lower() for name in pa.schema(table.schema().to_arrow()).names}
        new = [f.with_nullable(True) for f in schema if f.name.lower() not in known]
        if new:
            table.alter.add_columns([DeltaField.from_arrow(f) for f in new])
            self._current = None  # reload: the schema changed
        return [f.name for f in new]

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """The pyarrow filesystem and the table's root path in it (local or S3)."""
        options = self.storage_options or {}
        s3 = {
            "s3.endpoint": options.get("AWS_ENDPOINT_URL"),
            "s3.access-key-id": options.get("AWS_ACCESS_KEY_ID"),
            "s3.secret-access-key": options.get("AWS_SECRET_ACCESS_KEY"),
            "s3.session-token": options.get("AWS_SESSION_TOKEN"),
            "s3.region": options.get("AWS_REGION") or "us-east-1",
            "s3.force-virtual-addressing": options.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false"),
        }
        return filesystem_for(self.location, {k: v for k, v in s3.items() if v is not None})

    def drop(self) -> None:
        fs, root = self.filesystem()
        root = root.rstrip("/")
        fs.delete_dir_contents(f"{root}/_delta_log", missing_dir_ok=True)  # first: a half-deleted table is no table
        fs.delete_dir_contents(root, missing_dir_ok=True)
        if isinstance(fs, pafs.LocalFileSystem) and fs.get_file_info(root).type == pafs.FileType.Directory:
            fs.delete_dir(root)
        self._current = None

    def baseline(self) -> None:
        table = self.table()
        if self.at_baseline() or last_commit_of(table) is None:
            return
        # the app transaction goes back before epoch 0, so the view's first epoch is not taken as committed
        txn = Transaction(app_id=self.view, version=-1, last_updated=int(time.time() * 1000))
        commit = CommitProperties(custom_metadata={BASELINE: self.view}, app_transactions=[txn], max_commit_retries=0)
        table.create_write_transaction([], mode="append", schema=table.schema(), commit_properties=commit)
        self._current = None

    def at_baseline(self) -> bool:
        try:
            table = self.table()
        except WriterError:  # no table yet
            return False
        return BASELINE in next(iter_commit_infos(table), {})

    def table(self, version: int | None = None) -> DeltaTable:
        """The table now (kept open and brought up to date incrementally: reloading the log from
        the last checkpoint every epoch grows with the log), or at ``version``."""
        try:
            if version is not None:
                return DeltaTable(self.location, version=version, storage_options=self.storage_options)
            if self._current is None:
                self._current = DeltaTable(self.location, storage_options=self.storage_options)
            else:
                self._current.update_incremental()
            return self._current
        except TableNotFoundError as exc:
            self._current = None
            raise WriterError(f"view table {self.location} does not exist") from exc

    def last_commit(self) -> CommitRecord | None:
        return last_commit_of(self.table())

    def lookup(self, keys: pa.Table) -> pa.Table:
        return self.lookup_at(keys, None)

    def lookup_at(self, keys: pa.Table, version: int | None) -> pa.Table:
        """:meth:`lookup` in the table as it stood at ``version`` (None: now)."""
        table = self.table(version)
        key = tuple(keys.column_names)
        dataset = table.to_pyarrow_dataset()
        schema = plain_schema(dataset.schema)
        if key:  # e.g. Spark's session time zone -> the table's UTC (a table of no columns would lose its row count)
            keys = keys.cast(pa.schema([schema.field(k) for k in key]))
        stored = dataset.to_table(filter=_key_filter(keys, key, dataset.schema))
        return rows_with_keys(plain_types(stored, schema), keys, key)

    def commit(self, epoch: Epoch, change: Change) -> CommitRecord | None:
        return self._commit_retrying(
            epoch, lambda table: None if change.is_empty else self._commit_once(table, epoch, change)
        )

    def commit_files(self, epoch: Epoch, files: list[WrittenFile]) -> CommitRecord | None:
        """Add data files written by Spark's executors as ONE commit with the app transaction (view, epoch)."""

        def once(table: DeltaTable) -> CommitRecord | None:
            since = table.version()
            return self._record(append_delta_files(table, epoch, files), since)

        # (no files replacing the table's: its rows all go)
        return self._commit_retrying(
            epoch, lambda table: once(table) if files or isinstance(files, ReplacingFiles) else None
        )

    def _commit_retrying(self, epoch: Epoch, once: Callable[[DeltaTable], CommitRecord | None]) -> CommitRecord | None:
        def attempt() -> CommitRecord | None:
            try:
                table = self.table()
                done = table.transaction_version(epoch.view)
                if done is not None and epoch.number <= done:
                    log.info("%s: epoch %s already committed (last %s); skipping", epoch.view, epoch.number, done)
                    return None
                return once(table)
            except CommitFailedError as exc:
                raise CommitConflictError(f"{epoch.view}: epoch {epoch.number} lost a commit race: {exc}") from exc
            except (SchemaMismatchError, DeltaProtocolError) as exc:
                raise WriterError(f"{epoch.view}: epoch {epoch.number} does not fit the table: {exc}") from exc
            except (OSError, DeltaError) as exc:
                # A storage error before the log entry was written leaves the table as it was;
                # after it, the app transaction makes the retry a no-op.
                raise StorageError(f"{epoch.view}: epoch {epoch.number} failed: {exc}") from exc

        def reset() -> None:
            self._current = None  # reload the log

        return retry_commit(epoch, attempt, reset)

    def _commit_once(self, table: DeltaTable, epoch: Epoch, change: Change) -> CommitRecord | None:
        schema = pa.schema(table.schema().to_arrow())
        rows = change.rows.select(schema.names).cast(schema)
        since = table.version()

        def stamp(deleted: int) -> tuple[dict[str, str], CommitProperties]:
            props = CommitRecord.properties(epoch, inserted=rows.num_rows, deleted=deleted)
            txn = Transaction(app_id=epoch.view, version=epoch.number, last_updated=int(time.time() * 1000))
            # delta-rs retries only non-conflicting races itself; Lakeview's loop rechecks the epoch.
            return props, CommitProperties(custom_metadata=props, app_transactions=[txn], max_commit_retries=0)

        # the rows replace the table's: a Replacement, or the empty key (a global aggregate's one row)
        replaces = isinstance(change, Replacement) or change.key == ()
        if change.key is None and not replaces:
            props, commit = stamp(0)
            write_deltalake(table, rows, mode="append", storage_options=self.storage_options, commit_properties=commit)
            return self._record(props, since)
        if replaces:
            props, commit = stamp(table.to_pyarrow_dataset().count_rows() if table.version() > 0 else 0)
            write_deltalake(
                table, rows, mode="overwrite", storage_options=self.storage_options, commit_properties=commit
            )
            return self._record(props, since)
        # The deleted row count is only known after the merge, and commit info is written by it:
        # stamp with the count of stored rows the touched keys match (what the merge removes).
        stored = self.lookup(change.touched_keys()) if table.version() > 0 else rows.slice(0, 0)
        deleted = stored.num_rows
        props, commit = stamp(deleted)
        # Each term parenthesized: delta-rs's parser binds `x IS NOT DISTINCT FROM y AND ...` wrongly
        # ("Int64 AND Boolean"), which broke every key of two or more columns.
        predicate = " AND ".join(f'(t."{k}" IS NOT DISTINCT FROM s."{k}")' for k in change.key)
        columns = {f'"{name}"': f's."{name}"' for name in schema.names}
        if _repeats_keys(rows, change.key) or _repeats_keys(stored, change.key):
            # A multiset (keyed by the whole row, with copies): a MERGE may not match one stored row
            # to several source rows, and an update would keep every stored copy; so, as the Iceberg
            # writer does, every stored row of a touched key is deleted and the rows are inserted.
            merge = table.merge(
                _replace_source(rows, change, schema),
                predicate=f"(s.{OP} = 'd') AND {predicate}",
                source_alias="s",
                target_alias="t",
                commit_properties=commit,
            )
            metrics = (
                merge.when_matched_delete()
                .when_not_matched_insert(updates=columns, predicate=f"s.{OP} = 'i'")
                .execute()
            )
        else:
            metrics = (
                table.merge(
                    _merge_source(rows, change, schema),
                    predicate=predicate,
                    source_alias="s",
                    target_alias="t",
                    commit_properties=commit,
                )
                .when_matched_delete(predicate=f"s.{OP} = 'd'")
                .when_matched_update(updates=columns, predicate=f"s.{OP} = 'u'")
                .when_not_matched_insert(updates=columns, predicate=f"s.{OP} = 'u'")
                .execute()
            )
        actual = int(metrics.get("num_target_rows_updated", 0)) + int(metrics.get("num_target_rows_deleted", 0))
        if actual != deleted:  # a concurrent writer changed the rows between lookup and merge
            log.warning("%s: epoch %s merge removed %s rows, %s expected", epoch.view, epoch.number, actual, deleted)
        return self._record(props, since)

    def _record(self, props: dict[str, str], since: int) -> CommitRecord | None:
        """The commit just made on the table loaded at version ``since``, with its version: the newest
        commit after ``since`` carrying its epoch (not simply the newest version: a maintenance pass in
        another thread may have committed since). None when there is none: delta-rs writes no commit
        for a MERGE that changes no row (e.g. deletes of keys the table does not hold)."""
        epoch = int(props[EPOCH])
        for entry in iter_commit_infos(self.table()):
            record = record_of(entry)
            if int(entry["version"]) <= since:
                break
            if record is not None and record.epoch == epoch:
                return CommitRecord.from_properties(props, record.snapshot_id)  # type: ignore[return-value]
        log.info("%s: epoch %s changed no row of %s; nothing committed", self.view, epoch, self.location)
        return None


def _utc(field: pa.Field) -> pa.Field:
    """A column as Delta stores it: a timestamp with a time zone in UTC (also inside a struct, list or map;
    delta-rs refuses any other zone name, "Etc/UTC" too); any other type unchanged."""
    return field.with_type(_utc_type(field.type))


def _utc_type(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return pa.timestamp(kind.unit, "UTC")
    if pa.types.is_struct(kind):
        return pa.struct([_utc(kind.field(i)) for i in range(kind.num_fields)])
    if pa.types.is_map(kind):
        return pa.map_(_utc(kind.key_field), _utc(kind.item_field), kind.keys_sorted)
    if pa.types.is_large_list(kind):
        return pa.large_list(_utc(kind.value_field))
    if pa.types.is_list(kind):
        return pa.list_(_utc(kind.value_field))
    return kind


def _merge_source(rows: pa.Table, change: Change, schema: pa.Schema) -> pa.Table:
    """Upserted rows (op 'u') plus deleted keys (op 'd', other columns null) as one table.

    A key both upserted and deleted is upserted, as in the Iceberg writer.
    """
    assert change.key is not None
    parts = [rows.append_column(OP, pa.array(["u"] * rows.num_rows, pa.string()))]
    if change.deletes is not None and change.deletes.num_rows:
        keys = change.deletes.select(list(change.key)).cast(pa.schema([schema.field(k) for k in change.key]))
        keys = rows_without_keys(keys, rows.select(list(change.key)), change.key)
        full = {
            name: keys.column(name) if name in change.key else pa.nulls(keys.num_rows, schema.field(name).type)
            for name in schema.names
        }
        deletes = pa.table(full, schema=schema)
        parts.append(deletes.append_column(OP, pa.array(["d"] * deletes.num_rows, pa.string())))
    return pa.concat_tables(parts)


def _repeats_keys(rows: pa.Table, key: tuple[str, ...]) -> bool:
    """Whether two of ``rows`` share a key (null keys equal)."""
    return rows.num_rows > 1 and rows.select(list(key)).group_by(list(key)).aggregate([]).num_rows < rows.num_rows


def _replace_source(rows: pa.Table, change: Change, schema: pa.Schema) -> pa.Table:
    """Each touched key once (op 'd', other columns null), then the rows to insert (op 'i')."""
    assert change.key is not None
    key = list(change.key)
    keys = change.touched_keys().cast(pa.schema([schema.field(k) for k in key])).group_by(key).aggregate([]).select(key)
    full = {
        name: keys.column(name) if name in change.key else pa.nulls(keys.num_rows, schema.field(name).type)
        for name in schema.names
    }
    deletes = pa.table(full, schema=schema).append_column(OP, pa.array(["d"] * keys.num_rows, pa.string()))
    return pa.concat_tables([deletes, rows.append_column(OP, pa.array(["i"] * rows.num_rows, pa.string()))])


def _key_filter(keys: pa.Table, key: tuple[str, ...], schema: pa.Schema) -> pc.Expression:
    """A pyarrow filter matching at least every row with one of ``keys`` (maybe more): on the integer
    key columns only. pyarrow prunes files by guarantees built from the Delta log's statistics,
    which are wrong for other types: string_view bounds after a MERGE (no `greater_equal` kernel
    for string and string_view), JSON-number bounds of wide decimals and of floats (NaN, inf), and
    millisecond bounds of microsecond timestamps, all of which silently drop stored rows. The
    exact, null-safe match is done after the read (rows_with_keys)."""
    expression = pc.scalar(True)
    for name in key:
        if not pa.types.is_integer(schema.field(name).type):
            continue
        values = keys.column(name).unique()
        present = pc.drop_null(values)
        term = pc.field(name).isin(present)
        if len(present) < len(values):
            term = term | pc.field(name).is_null()
        expression = expression & term
    return expression
