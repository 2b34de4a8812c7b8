"""The live rows of an Iceberg view table, by data file and row position, kept across epochs.

A merge-on-read commit must name the position of every stored row it replaces. Data files,
delete files and manifests never change once written, so a long-running pipeline reads each
one once: the rows of every data file (with their positions in the file), the positions each
delete file names, and the entries of each manifest. Per data file the cache holds the rows
still alive and which delete files it has applied, so an epoch applies only the delete files
that are new since the last (one per commit), re-reads only the manifest list and whatever it
has not seen (the files of a compaction, say), and the touched keys are found through a
:class:`~writers.key_index.KeyIndex` (key -> file and position), so finding them costs what the
delta costs, not what the table costs. The rows a commit writes, the positions it deletes and the rows they held are added to
the cache straight from memory (the last for deriving the snapshot's change).

Memory is bounded by ``budget_bytes``: past it the least recently used files are dropped and
read again when next needed (the epoch then costs a read of those files).

A table with more live rows than its ``remote`` allows (``[spark] driver_keys_max``) is never
read by the driver: finding keys, folding deletes into data files and deriving a snapshot's
change run on Spark's executors (:mod:`spark_jobs.executors.reads`), and the driver keeps only
the table's file list, its delete positions (bounded by the fold threshold) and what the
epoch's own delta holds.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry
from pyiceberg.table import FileScanTask, Table

from lakeview.errors import WriterError
from writers.arrow_ops import _hashable_alike, rows_with_keys, rows_without_keys, with_positions
from writers.iceberg.position_deletes import read_position_deletes
from writers.key_index import KeyIndex, indexable, key_values
from writers.maintenance import MaintenancePolicy

log = logging.getLogger("lakeview.writers.live_files")
POS = "__lv_pos"
DEFAULT_BUDGET_BYTES = 1 << 30
KEPT_CHANGES = 16  # remote tables: the (gone, came) of this many recent commits, for publishing their change


@dataclass(frozen=True)
class Found:
    """Stored rows of some keys and where they are."""

    rows: pa.Table  # the table's columns
    positions: pa.Table  # file_path, pos: one per row of ``rows``
    files_read: int  # data files read from storage for this probe (0 when all were cached)
    indexed: bool = False  # found through the key index (else by probing every live row)


@dataclass(frozen=True)
class LiveTable:
    """One snapshot's live data files, each with the positions its delete files remove."""

    snapshot_id: int | None
    schema_id: int
    data: list[DataFile]
    deletes: dict[str, dict[str, pa.Array]]  # data file path -> delete file path -> the positions it deletes there
    delete_files: list[DataFile]

    def to_rewrite(
        self, policy: MaintenancePolicy, touched: frozenset[str] = frozenset()
    ) -> tuple[list[DataFile], list[DataFile]]:
        """(data files a compaction rewrites, delete files that then go), ``touched``: the data
        files a commit adds deletes to.

        Once the table holds ``delete_files_max`` delete files (the commit's included): every
        data file with deletes, and every delete file. Once ``compact_min_files`` data files are
        below ``small_file_bytes``: those small files (with their deletes folded when folding;
        without folding, only small files no delete file names)."""
        fold = len(self.delete_files) + (1 if touched else 0) >= policy.delete_files_max
        small = [f for f in self.data if f.file_size_in_bytes < policy.small_file_bytes]
        if not fold:
            small = [f for f in small if f.file_path not in self.deletes]
        rewrite = {f.file_path: f for f in small} if len(small) >= policy.compact_min_files else {}
        if fold:
            rewrite.update({f.file_path: f for f in self.data if f.file_path in self.deletes or f.file_path in touched})
        return list(rewrite.values()), (self.delete_files if fold else [])

    @property
    def rows(self) -> int:
        """Live rows: the data files' rows minus the positions delete files remove."""
        return sum(f.record_count for f in self.data) - sum(
            len(p) for by_file in self.deletes.values() for p in by_file.values()
        )

    def deleted(self, path: str) -> pa.Array | None:
        """Every deleted position of one data file (None: none)."""
        parts = list(self.deletes.get(path, {}).values())
        return None if not parts else pa.concat_arrays(parts) if len(parts) > 1 else parts[0]


class RemoteRows(Protocol):
    """Reads of a table too large for the driver, done where the table can be: Spark's
    executors (:class:`spark_jobs.executors.reads.ExecutorReads`)."""

    rows_max: int  # tables with more live rows go remote

    def find(self, table: Table, live: LiveTable, keys: pa.Table, key: tuple[str, ...]) -> Found:
        """The live rows whose key is one of ``keys`` (null-safe), with their positions."""

    def rewrite(self, table: Table, live: LiveTable, files: list[DataFile], drop: pa.Table) -> list[DataFile]:
        """``files`` written again without their deleted rows and the rows at ``drop``
        (``file_path``, ``pos``); the new data files (uncommitted)."""

    def change(
        self, table: Table, parent: LiveTable, deletes: list[DataFile], removed: list[DataFile], added: list[DataFile]
    ) -> pa.Table:
        """The consolidated Z-set of a snapshot that added ``deletes`` and ``added`` and
        removed ``removed`` on top of ``parent``."""


class LiveFiles:
    def __init__(
        self, budget_bytes: int = DEFAULT_BUDGET_BYTES, use_index: bool = True, remote: RemoteRows | None = None
    ) -> None:
        self.budget_bytes = budget_bytes
        self.use_index = use_index  # False: find keys by probing every live row (bench/lookup.py's baseline)
        self.remote = remote  # where tables past ``remote.rows_max`` live rows are read (None: always here)
        self._changes: OrderedDict[frozenset[str], tuple[pa.Table, pa.Table]] = (
            OrderedDict()
        )  # remote: a commit's (gone, came) by its files
        self._found: tuple[tuple[int | None, int], tuple[str, ...], pa.Table, Found] | None = (
            None  # the last find ((snapshot, schema), key, keys, found)
        )
        # (data file, schema id) -> every row of the file, in file order (row i is position i)
        self._rows: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()
        # (data file, schema id) -> (the delete files applied, the file's rows, the rows they leave with POS): a
        # file gains one delete file per commit, so an epoch filters out only the positions new since the last
        self._alive_rows: dict[tuple[str, int], tuple[frozenset[str], pa.Table, pa.Table]] = {}
        self._removed: dict[str, pa.Table] = {}  # delete file this writer committed -> the rows it deleted
        self._sizes: dict[tuple[str, int], int] = {}  # bytes of each cached entry
        self._bytes = 0
        self._deletes: dict[str, dict[str, pa.Array]] = {}  # delete file -> data file -> positions
        self._entries: dict[str, list[ManifestEntry]] = {}  # manifest -> live entries
        self._live: LiveTable | None = None
        self._index: KeyIndex | None = None  # the current snapshot's keys, when the table's key allows one
        self._pending: _Pending | None = None  # what the writer's staged commit does to the index
        self.index_builds = 0  # times the key index was built from the table's rows (once, unless others commit)
        # (key, schema id) found stored more than once (e.g. a lookup by a prefix of the table's key): probed
        # from then on, without building an index for it again nor dropping the index of the table's key
        self._not_unique: set[tuple[tuple[str, ...], int]] = set()

    def live(self, table: Table, snapshot_id: int | None = None) -> LiveTable:
        """The live files of one snapshot of ``table`` (default: the current one), manifests
        read once each."""
        current = table.current_snapshot()
        snapshot = current if snapshot_id is None else table.snapshot_by_id(snapshot_id)
        is_current = snapshot is current
        schema_id = table.schema().schema_id
        if (
            is_current
            and self._live is not None
            and snapshot is not None
            and (self._live.snapshot_id, self._live.schema_id) == (snapshot.snapshot_id, schema_id)
        ):
            return self._live
        data: list[DataFile] = []
        delete_files: list[DataFile] = []
        manifests = snapshot.manifests(table.io) if snapshot is not None else []
        for manifest in manifests:
            if manifest.manifest_path not in self._entries:
                self._entries[manifest.manifest_path] = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            for entry in self._entries[manifest.manifest_path]:
                (data if entry.data_file.content == DataFileContent.DATA else delete_files).append(entry.data_file)
        if any(f.content == DataFileContent.EQUALITY_DELETES for f in delete_files):
            raise WriterError(
                f"{table.name()}: the table has equality delete files; Lakeview writes and reads only position deletes"
            )
        deletes: dict[str, dict[str, pa.Array]] = {}
        for delete_file in delete_files:
            if delete_file.file_path not in self._deletes:
                self._deletes[delete_file.file_path] = read_position_deletes(table.io, delete_file)
            for path, positions in self._deletes[delete_file.file_path].items():
                deletes.setdefault(path, {})[delete_file.file_path] = positions
        live = LiveTable(
            snapshot_id=snapshot.snapshot_id if snapshot is not None else None,
            schema_id=schema_id,
            data=data,
            deletes=deletes,
            delete_files=delete_files,
        )
        if is_current:  # drop what the current snapshot no longer references
            self._entries = {m.manifest_path: self._entries[m.manifest_path] for m in manifests}
            self._deletes = {f.file_path: self._deletes[f.file_path] for f in delete_files}
            self._removed = {p: rows for p, rows in self._removed.items() if p in self._deletes}
            live_paths = {f.file_path for f in data}
            for cached in [k for k in self._rows if k[0] not in live_paths or k[1] != schema_id]:
                del self._rows[cached]
                self._bytes -= self._sizes.pop(cached, 0)
            self._alive_rows = {k: v for k, v in self._alive_rows.items() if k in self._rows}
            self._live = live
        return live

    def rows_of(self, table: Table, data_file: DataFile, deletes: dict[str, pa.Array] | None = None) -> pa.Table:
        """The rows of one data file (the table's current columns) the ``deletes`` (delete file
        -> positions in this file) leave."""
        rows, _ = self._alive(table, table.schema().schema_id, data_file, deletes or {})
        return rows.drop_columns([POS])

    def rows_without(
        self, table: Table, data_file: DataFile, deletes: dict[str, pa.Array], positions: pa.Table
    ) -> pa.Table:
        """The rows of one data file that ``deletes`` leave, minus those at ``positions``
        (``file_path``, ``pos``) in it: the file as a rewrite writes it."""
        rows, _ = self._alive(table, table.schema().schema_id, data_file, deletes)
        mine = positions.filter(pc.equal(positions.column("file_path"), data_file.file_path)).column("pos")
        if len(mine):
            rows = rows.filter(pc.invert(pc.is_in(rows.column(POS), value_set=mine.combine_chunks())))
        return rows.drop_columns([POS])

    def rows_deleted_by(self, table: Table, delete_file: DataFile, before: LiveTable) -> pa.Table:
        """The rows ``delete_file`` deletes, as they were in ``before`` (the snapshot it was
        committed on): kept from the commit when this writer made it, else read."""
        if delete_file.file_path in self._removed:
            return self._removed[delete_file.file_path]
        files = {f.file_path: f for f in before.data}
        parts = []
        for path, positions in read_position_deletes(table.io, delete_file).items():
            if path not in files:
                raise WriterError(f"{table.name()}: {delete_file.file_path} deletes from {path}, not live before it")
            rows, _ = self._alive(table, table.schema().schema_id, files[path], before.deletes.get(path, {}))
            parts.append(rows.filter(pc.is_in(rows.column(POS), value_set=positions)).drop_columns([POS]))
        schema = table.schema().as_arrow()
        return pa.concat_tables([p.cast(schema) for p in parts]) if parts else schema.empty_table()

    def distributed(self, live: LiveTable) -> bool:
        """Whether ``live`` is too large for the driver: its reads go to ``remote``."""
        return self.remote is not None and live.rows > self.remote.rows_max

    def find(self, table: Table, keys: pa.Table, key: tuple[str, ...]) -> Found:
        """The live rows of ``table`` whose key is one of ``keys`` (null-safe), with positions.

        A commit's keys just found for its lookup (the same snapshot; the lookup's key the same or a prefix
        of the commit's, e.g. a value multiset looked up by group) are taken from the lookup's rows: no
        second Spark job, index probe or scan."""
        live = self.live(table)
        distributed = self.distributed(live)
        if distributed:
            self._forget_rows()
        last = self._found
        if last is not None and last[0] == (live.snapshot_id, live.schema_id) and _covered(last[1], last[2], keys, key):
            return _subset(last[3], keys, key)
        if distributed:
            assert self.remote is not None
            found = self.remote.find(table, live, keys, key)
        else:
            found = self._find_here(table, live, keys, key)
        self._found = ((live.snapshot_id, live.schema_id), key, keys, found)
        return found

    def _find_here(self, table: Table, live: LiveTable, keys: pa.Table, key: tuple[str, ...]) -> Found:
        """:meth:`find` from the rows cached here: through the key index, else by probing every live row."""
        schema = table.schema().as_arrow()
        index = self._key_index(table, live, key, keys.schema)
        read = 0
        hits: list[tuple[str, pa.Table]] = []
        if index is not None:
            files = {f.file_path: f for f in live.data}
            for path, at in index.find(key_values(keys, key)).items():
                every, fresh = self._every(table, live.schema_id, files[path])
                read += fresh
                positions = pa.array(at, pa.int64())
                hits.append((path, every.take(positions).append_column(POS, positions)))
        else:
            alive = []
            for data_file in live.data:
                stored, fresh = self._alive(table, live.schema_id, data_file, live.deletes.get(data_file.file_path, {}))
                read += fresh
                alive.append((data_file, stored))
            hits = [(data_file.file_path, hit) for data_file, hit in _hits(alive, keys, key) if hit.num_rows]
        found_rows = (
            pa.concat_tables([hit.drop_columns([POS]).cast(schema) for _, hit in hits])
            if hits
            else schema.empty_table()
        )
        at = pa.table(
            {
                "file_path": pa.chunked_array(
                    [pa.repeat(pa.scalar(path, pa.string()), hit.num_rows) for path, hit in hits], pa.string()
                ),
                "pos": pa.concat_arrays([hit.column(POS).combine_chunks().cast(pa.int64()) for _, hit in hits])
                if hits
                else pa.array([], pa.int64()),
            }
        )
        return Found(rows=found_rows, positions=at, files_read=read, indexed=index is not None)

    def remember(
        self,
        table: Table,
        data_files: list[DataFile],
        rows: pa.Table,
        delete_file: DataFile | None,
        named: Found,
        replaced: Found,
        removed: list[DataFile],
    ) -> None:
        """Seed the cache with what a commit staged on ``table`` writes (used once the commit is
        in a snapshot): ``rows`` in ``data_files``, ``named`` in ``delete_file``; ``replaced``,
        every stored row it replaces or deletes; ``removed``, the data files it rewrites."""
        schema_id = table.schema().schema_id
        if self._live is not None and self.distributed(self._live):
            # nothing of the table kept here; the snapshot's change, for publishing it, from the commit itself
            self._changes[_commit_files(data_files, [delete_file] if delete_file is not None else [], removed)] = (
                replaced.rows,
                rows,
            )
            while len(self._changes) > KEPT_CHANGES:
                self._changes.popitem(last=False)
        elif len(data_files) == 1:
            self._store((data_files[0].file_path, schema_id), rows.cast(table.schema().as_arrow()))
        if delete_file is not None:
            positions = named.positions
            by_path: dict[str, pa.Array] = {}
            for path in pc.unique(positions.column("file_path")).to_pylist():
                mask = pc.equal(positions.column("file_path"), path)
                by_path[path] = positions.column("pos").filter(mask).combine_chunks()
            self._deletes[delete_file.file_path] = by_path
            self._removed[delete_file.file_path] = named.rows
        current = table.current_snapshot()
        if self._index is not None and current is not None and self._index.snapshot_id == current.snapshot_id:
            self._pending = _Pending(
                base=current.snapshot_id,
                replaced=replaced.rows,
                removed=[f.file_path for f in removed],
                files=data_files,
                rows=rows if len(data_files) == 1 else None,
            )

    def change_of(
        self, added: list[DataFile], deletes: list[DataFile], removed: list[DataFile]
    ) -> tuple[pa.Table, pa.Table] | None:
        """(rows gone, rows come) of this writer's commit that added the data files ``added`` and
        delete files ``deletes`` and removed ``removed``, when the table is distributed and the
        commit was made by this process; else None."""
        return self._changes.get(_commit_files(added, deletes, removed))

    def _forget_rows(self) -> None:
        """Drop the index and every cached row (the table went remote)."""
        if self._index is not None or self._rows:
            log.info(
                "the table passed %s live rows: its keys are found on Spark's executors; index and rows dropped",
                self.remote.rows_max if self.remote else None,
            )
        self._index, self._pending = None, None
        self._rows.clear()
        self._alive_rows.clear()
        self._sizes.clear()
        self._bytes = 0

    def _key_index(self, table: Table, live: LiveTable, key: tuple[str, ...], keys: pa.Schema) -> KeyIndex | None:
        """The index of the current snapshot: kept, moved forward by the writer's last commit,
        or built from the live rows. None when the key cannot be indexed (see key_index)."""
        if live.snapshot_id is None or not self.use_index or not indexable(table.schema().as_arrow(), keys, key):
            return None  # (an empty table has nothing to index; its first commit is an append)
        if (key, live.schema_id) in self._not_unique:
            return None
        index, pending = self._index, self._pending
        if index is not None and (index.key, index.schema_id) == (key, live.schema_id):
            self._pending = None
            if index.snapshot_id == live.snapshot_id:
                return index
            snapshot = table.current_snapshot()
            if (
                pending is not None
                and snapshot is not None
                and snapshot.parent_snapshot_id == pending.base
                and live.snapshot_id == snapshot.snapshot_id
                and {f.file_path for f in pending.files} <= {f.file_path for f in live.data}
            ):
                written = [
                    (
                        f.file_path,
                        key_values(
                            pending.rows if pending.rows is not None else self._every(table, live.schema_id, f)[0], key
                        ),
                    )
                    for f in pending.files
                ]
                if index.advance(live.snapshot_id, key_values(pending.replaced, key), pending.removed, written):
                    return index
            log.info(
                "%s: snapshot %s is not the writer's last commit on the indexed one (%s); indexing its keys again",
                table.name(),
                live.snapshot_id,
                index.snapshot_id,
            )
        built = self._build_index(table, live, key)
        if built is None:  # keys stored more than once: the index of another key (and its pending move) stays
            self._not_unique.add((key, live.schema_id))
            if index is not None and index.key == key:
                self._index, self._pending = None, None
            return None
        self._index, self._pending = built, None
        return built

    def _build_index(self, table: Table, live: LiveTable, key: tuple[str, ...]) -> KeyIndex | None:
        self.index_builds += 1
        index = KeyIndex(key=key, snapshot_id=live.snapshot_id, schema_id=live.schema_id)
        for data_file in live.data:
            every, _ = self._every(table, live.schema_id, data_file)
            gone = live.deleted(data_file.file_path)
            alive = None
            if gone is not None:
                keep = pc.invert(pc.is_in(pa.array(range(every.num_rows), pa.int64()), value_set=gone.cast(pa.int64())))
                alive = [i for i, k in enumerate(keep.to_pylist()) if k]
            if not index.add_file(data_file.file_path, key_values(every, key), alive):
                log.info("%s: a key is stored more than once; finding keys by probing the rows", table.name())
                return None
        return index

    def _every(self, table: Table, schema_id: int, data_file: DataFile) -> tuple[pa.Table, int]:
        """(every row of ``data_file`` in file order, 1 if it was read from storage)."""
        cache_key = (data_file.file_path, schema_id)
        cached = self._rows.get(cache_key)
        if cached is not None:
            self._rows.move_to_end(cache_key)
            return cached, 0
        reader = ArrowScan(
            table_metadata=table.metadata, io=table.io, projected_schema=table.schema(), row_filter=AlwaysTrue()
        )
        every = reader.to_table(tasks=[FileScanTask(data_file)]).cast(
            table.schema().as_arrow()
        )  # every row, in file order
        self._store(cache_key, every)
        return every, 1

    def _alive(
        self, table: Table, schema_id: int, data_file: DataFile, deletes: dict[str, pa.Array]
    ) -> tuple[pa.Table, int]:
        """(the rows of ``data_file`` that ``deletes`` leave, with POS; 1 if the file was read
        from storage)."""
        every, read = self._every(table, schema_id, data_file)
        cache_key, applied = (data_file.file_path, schema_id), frozenset(deletes)
        kept = self._alive_rows.get(cache_key)
        if kept is not None and kept[1] is every and kept[0] <= applied:
            # the rows some of these delete files left (an earlier epoch's): only the newer ones are applied
            rows, parts = kept[2], [deletes[path] for path in applied - kept[0]]
        else:
            rows, parts = with_positions(every, POS), list(deletes.values())
        if parts:
            positions = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
            rows = rows.filter(pc.invert(pc.is_in(rows.column(POS), value_set=positions.cast(pa.int64()))))
        self._alive_rows[cache_key] = (applied, every, rows)
        return rows, read

    def _store(self, cache_key: tuple[str, int], rows: pa.Table) -> None:
        self._bytes -= self._sizes.pop(cache_key, 0)
        self._rows[cache_key] = rows
        self._rows.move_to_end(cache_key)
        self._sizes[cache_key] = rows.get_total_buffer_size()
        self._bytes += self._sizes[cache_key]
        while self._bytes > self.budget_bytes and len(self._rows) > 1:
            dropped, _ = self._rows.popitem(last=False)
            self._bytes -= self._sizes.pop(dropped)
            self._alive_rows.pop(dropped, None)


@dataclass(frozen=True)
class _Pending:
    """A staged commit's effect on the key index, applied once the commit is the current snapshot."""

    base: int  # the snapshot it was staged on
    replaced: pa.Table  # stored rows it replaces or deletes
    removed: list[str]  # data files it rewrites
    files: list[DataFile]  # data files it adds
    rows: pa.Table | None  # their rows in file order (one file), else read back


def _hits(
    alive: list[tuple[DataFile, pa.Table]], keys: pa.Table, key: tuple[str, ...]
) -> list[tuple[DataFile, pa.Table]]:
    """Each file's rows whose key is one of ``keys``. One integer or string key column: ONE
    membership test over every file's rows (the keys' hash table built once, not per file)."""
    if (
        len(key) != 1
        or not alive
        or not _hashable_alike(alive[0][1].schema.field(key[0]).type, keys.schema.field(key[0]).type)
    ):
        return [(data_file, rows_with_keys(stored, keys, key)) for data_file, stored in alive]
    column = pa.chunked_array(
        [chunk for _, stored in alive for chunk in stored.column(key[0]).chunks], alive[0][1].schema.field(key[0]).type
    )
    member = pc.is_in(column, value_set=pc.unique(keys.column(key[0])), skip_nulls=False)
    out, offset = [], 0
    for data_file, stored in alive:
        mask = member.slice(offset, stored.num_rows)
        offset += stored.num_rows
        out.append((data_file, stored.filter(mask) if pc.any(mask).as_py() else stored.schema.empty_table()))
    return out


def _commit_files(added: list[DataFile], deletes: list[DataFile], removed: list[DataFile]) -> frozenset[str]:
    """What names one commit: the files it added (data and delete files) and removed."""
    return frozenset([*(f"+{f.file_path}" for f in [*added, *deletes]), *(f"-{f.file_path}" for f in removed)])


def _covered(asked_key: tuple[str, ...], asked: pa.Table, keys: pa.Table, key: tuple[str, ...]) -> bool:
    """Whether a find of ``asked`` by ``asked_key`` returned every row whose ``key`` is one of ``keys``:
    ``asked_key`` is ``key`` or a prefix of it, and each of ``keys`` has its prefix among ``asked``."""
    if key[: len(asked_key)] != asked_key:
        return False
    return not rows_without_keys(keys.select(list(asked_key)), asked, asked_key).num_rows


def _subset(found: Found, keys: pa.Table, key: tuple[str, ...]) -> Found:
    """The part of ``found`` whose key is one of ``keys``."""
    numbered = with_positions(found.rows, POS)
    kept = rows_with_keys(numbered, keys, key).column(POS).combine_chunks()
    return Found(rows=found.rows.take(kept), positions=found.positions.take(kept), files_read=0, indexed=found.indexed)
