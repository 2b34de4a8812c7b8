"""Where each key of a keyed table lives: key -> (data file, row position), for one snapshot.

A merge-on-read commit names the stored row of every key it replaces. Probing every live row
for the touched keys costs what the table costs (measured: ~0.05 s per million rows per
commit); this index answers from a hash map, so finding the rows of a delta costs what the
delta costs. It is built once from the table's live rows and then moved forward by the
writer's own commits (:meth:`KeyIndex.advance`): the keys a commit replaced or deleted leave,
the rows it wrote come in at their positions in the new files. Any other commit (a
maintenance compaction, a lost race) makes it stale and it is rebuilt from the table.

Only for keys whose values hash alike on both sides (one or more integer or string columns),
and only while every key is unique in the table; otherwise the caller probes the rows.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa

_POS_BITS = 40  # a row position below 2**40 per data file; the file's number above it


def indexable(stored: pa.Schema, keys: pa.Schema, key: tuple[str, ...]) -> bool:
    """Whether ``key``'s values compare in Python exactly as the writers compare them:
    integers on both sides, strings on both sides, or timestamps of one type (no float NaN,
    no lossy casts)."""
    return bool(key) and all(_alike(stored.field(k).type, keys.field(k).type) for k in key)


def _alike(stored: pa.DataType, probe: pa.DataType) -> bool:
    strings = (pa.types.is_string, pa.types.is_large_string)
    return (
        (pa.types.is_integer(stored) and pa.types.is_integer(probe))
        or (any(t(stored) for t in strings) and any(t(probe) for t in strings))
        or (pa.types.is_timestamp(stored) and stored == probe)
    )


def key_values(rows: pa.Table, key: tuple[str, ...]) -> list[Hashable]:
    """Each row's key as a dict key: the value for one column, a tuple for several (None = NULL; a
    timestamp as its integer count of its unit, which compares as the timestamps do)."""
    columns = [_comparable(rows.column(k)).to_pylist() for k in key]
    return columns[0] if len(columns) == 1 else list(zip(*columns))


def _comparable(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return column.cast(pa.int64()) if pa.types.is_timestamp(column.type) else column


@dataclass
class KeyIndex:
    """The live location of every key of one table snapshot."""

    key: tuple[str, ...]
    snapshot_id: int | None
    schema_id: int
    files: list[str] = field(default_factory=list)  # file number -> data file path
    numbers: dict[str, int] = field(default_factory=dict)
    where: dict[Hashable, int] = field(default_factory=dict)  # key -> file number << 40 | position

    def add_file(self, path: str, keys: list[Hashable], alive: Iterable[int] | None = None) -> bool:
        """Index a data file's keys (``alive``: only these positions). False when a key is
        already indexed (keys are not unique: the index cannot stand)."""
        number = self.numbers.setdefault(path, len(self.files))
        if number == len(self.files):
            self.files.append(path)
        base = number << _POS_BITS
        before = len(self.where)
        positions = range(len(keys)) if alive is None else alive
        count = 0
        for pos in positions:
            self.where[keys[pos]] = base | pos
            count += 1
        return len(self.where) == before + count

    def find(self, keys: list[Hashable]) -> dict[str, list[int]]:
        """Positions by data file of the given keys that are live (each key once)."""
        found: dict[int, list[int]] = {}
        mask = (1 << _POS_BITS) - 1
        for at in map(self.where.get, dict.fromkeys(keys)):
            if at is not None:
                found.setdefault(at >> _POS_BITS, []).append(at & mask)
        return {self.files[number]: positions for number, positions in found.items()}

    def advance(
        self,
        snapshot_id: int | None,
        gone: list[Hashable],
        removed: list[str],
        written: list[tuple[str, list[Hashable]]],
    ) -> bool:
        """Move to the snapshot of one of the writer's commits: ``gone``, the keys whose stored
        rows it replaced or deleted; ``removed``, the data files it rewrote (their live rows
        are among ``written``); ``written``, each new data file with its rows' keys in file
        order. False when that leaves a key in two places (the caller rebuilds instead)."""
        pop = self.where.pop
        for value in gone:
            pop(value, None)
        dropped = {self.numbers.pop(path) for path in removed if path in self.numbers}
        for number in dropped:
            self.files[number] = ""  # numbers are not reused: a stale entry can never point at a new file
        for path, keys in written:
            number = self.numbers.setdefault(path, len(self.files))
            if number == len(self.files):
                self.files.append(path)
            base = number << _POS_BITS
            if self.where.keys().isdisjoint(keys):  # the usual case: one bulk insert
                before = len(self.where)
                self.where.update(zip(keys, range(base, base + len(keys))))
                if len(self.where) == before + len(keys):
                    continue
                return False  # a key twice in the file
            for pos, value in enumerate(keys):
                at = self.where.get(value)
                if at is not None and (at >> _POS_BITS) not in dropped:
                    return False
                self.where[value] = base | pos
        self.snapshot_id = snapshot_id
        return True
