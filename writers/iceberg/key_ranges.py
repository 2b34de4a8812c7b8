"""Rows of an Iceberg table found by key from its Parquet row groups' key ranges, in the driver, no Spark job.

For a table too large to hold (a change feed's mirror past ``[spark] driver_keys_max`` live rows) whose data
files are each sorted by the key and written in small row groups (the table property
``write.parquet.row-group-limit``, :data:`writers.graph_mirrors.CLUSTERED`): a lookup reads only the row groups whose key range (the first key
column's min and max in the file's footer) can hold an asked key, and filters them to the asked keys. What is
held is each live data file's footer (its row groups' ranges), read once per file: data files never change.
So a lookup costs the keys it asks for (one row group each, at most), not the table's rows.

Files that are not sorted still give the right rows (their row groups' ranges are wide: more of them are
read); files with delete files are not read here (:meth:`KeyRanges.find` returns None: the caller looks the
keys up another way).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.table import Table

from writers.arrow_ops import rows_with_keys
from writers.iceberg.live_files import LiveFiles
from writers.key_index import indexable, key_values


@dataclass(frozen=True)
class _Footer:
    metadata: pq.FileMetaData
    ranges: list[tuple[Hashable, Hashable] | None]  # per row group: the first key column's (min, max); None: unknown


class KeyRanges:
    """The footers of one table's data files (by path), kept while the files are live."""

    def __init__(self) -> None:
        self.footers: dict[str, _Footer] = {}
        self.row_groups_read = 0  # by the last find (for bench/ and tests)

    def find(self, table: Table, live: LiveFiles, keys: pa.Table, key: tuple[str, ...]) -> pa.Table | None:
        """The stored rows (the table's columns) whose key equals a row of ``keys`` (NULL matches NULL); None
        when they cannot be found from the row groups (a delete file, a key that is not integers or strings)."""
        schema = table.schema().as_arrow()
        if not key or not indexable(schema, keys.schema, key[:1]) or pa.types.is_timestamp(schema.field(key[0]).type):
            return None
        files = live.live(table)
        if files.delete_files:
            return None
        self.footers = {f.file_path: self.footers[f.file_path] for f in files.data if f.file_path in self.footers}
        wanted = sorted({v for v in key_values(keys, key[:1]) if v is not None})
        nulls = keys.column(key[0]).null_count > 0
        parts, self.row_groups_read = [], 0
        for data_file in files.data:
            footer = self._footer(table, data_file.file_path, key[0])
            groups = [i for i, r in enumerate(footer.ranges) if _may_hold(r, wanted, nulls)]
            if not groups:
                continue
            self.row_groups_read += len(groups)
            with table.io.new_input(data_file.file_path).open() as stream:
                rows = pq.ParquetFile(stream, metadata=footer.metadata).read_row_groups(groups, columns=schema.names)
            parts.append(rows_with_keys(rows, keys, key).cast(schema))
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def _footer(self, table: Table, path: str, column: str) -> _Footer:
        footer = self.footers.get(path)
        if footer is None:
            with table.io.new_input(path).open() as stream:
                metadata = pq.read_metadata(stream)
            footer = self.footers[path] = _Footer(metadata, _ranges(metadata, column))
        return footer


def _ranges(metadata: pq.FileMetaData, column: str) -> list[tuple[Hashable, Hashable] | None]:
    """Each row group's (min, max) of ``column`` (integers or strings); None where the footer has
    no statistics (or the column holds NULLs: such a row group is always read)."""
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    at = names.index(column)
    ranges: list[tuple[Hashable, Hashable] | None] = []
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(at).statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            ranges.append(None)
        else:
            ranges.append((stats.min, stats.max))
    return ranges


def _may_hold(bounds: tuple[Hashable, Hashable] | None, wanted: list, nulls: bool) -> bool:
    """Whether a row group with key range ``bounds`` may hold one of the sorted ``wanted`` values (or a NULL)."""
    if bounds is None:
        return nulls or bool(wanted)
    low, high = bounds
    at = bisect.bisect_left(wanted, low)
    return at < len(wanted) and wanted[at] <= high
