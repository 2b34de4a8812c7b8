"""A keyed Z-set state table held in memory as a few sorted runs, so a lookup costs the keys it asks for.

Each run is an arrow table sorted by a 64-bit hash of the key columns (integer keys mixed in arrow, others
by DuckDB's ``hash``), with the hashes alongside. An apply sorts its delta into a new run; FAN_IN runs of
one size class are merged into one (weights netted, rows that cancel dropped), so a table of n rows has
O(log n) runs and each row is merged O(log n) times: a log-structured merge with tiered compaction, as in
LSM trees. A lookup hashes its keys and binary-searches each run (``bisect`` on the hash buffer; no numpy
here), or, when it asks for a large share of a run, probes all of its hashes with one vectorized ``is_in``;
the rows found are then matched exactly on the key (hashes may collide) and netted.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lakeview.graph.zset import WEIGHT, Duck, cols_sql, data_columns, q, union_sql

HASH = "__lv_h"
MIX = pa.scalar(0x100000001B3, pa.uint64())  # FNV's prime: mixes one integer key column into the next
NULL_KEY = -0x61C8864680B583EB  # stands in for a NULL integer key in the hash (exact matching tells them apart)
FAN_IN = 4  # runs of one size class merged together: each row is merged log_4(rows / 1024) times
# A binary search of one key costs about as much as probing this many rows with a vectorized is_in.
ROWS_PER_SEARCH = 256


@dataclass
class Run:
    """Rows sorted by the hash of their key, and those hashes (uint64, same order)."""

    rows: pa.Table
    hashes: pa.Array
    netted: bool = False  # equal rows summed and zero weights dropped (a merge's output)

    def searchable(self) -> memoryview:
        buf = self.hashes.buffers()[1]
        start = self.hashes.offset
        return memoryview(buf).cast("B").cast("Q")[start : start + len(self.hashes)]


def level(run: Run) -> int:
    """A run's size class: 0 below 4,096 rows, then one more per factor of FAN_IN (4)."""
    return max(0, run.rows.num_rows.bit_length() - 11) // 2


class KeyedRuns:
    """One state table: Z-set rows with ``key`` columns (empty: unkeyed, every lookup reads all)."""

    def __init__(self, key: tuple[str, ...], schema: pa.Schema, duck: Duck) -> None:
        self.key = key
        self.duck = duck
        self.runs: list[Run] = []
        self._typed(schema)

    def _typed(self, schema: pa.Schema) -> None:
        self.schema = schema
        types = [schema.field(k).type for k in self.key]
        self.integer_key = bool(self.key) and all(pa.types.is_integer(t) for t in types)
        # exact matching in arrow needs equality to be SQL's IS NOT DISTINCT FROM: not so for floats (NaN)
        self.arrow_match = all(not pa.types.is_floating(t) and not pa.types.is_nested(t) for t in types)

    # -- writes ---------------------------------------------------------------------------------------------
    def apply(self, delta: pa.Table) -> None:
        """Add ``delta`` as a new run (cost: its rows, plus amortized merges)."""
        if delta.num_rows == 0:
            return
        try:
            delta = delta.select(self.schema.names).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
            self._widen(delta)
            return
        hashes = self._hash(delta)
        held = sum(r.rows.num_rows for r in self.runs)
        if self.runs and delta.num_rows * FAN_IN >= held:
            # a delta as large as a FAN_IN-th of the rows held (state rewritten wholesale each epoch, e.g. an
            # aggregate whose every group changes): merge everything now, so lookups read one netted run
            # (cost: the rows held, at most FAN_IN times the delta's; the merge sorts, so the delta is not sorted first)
            merged = self._merge([*self.runs, Run(delta, hashes)])
            self.runs = [merged] if merged.rows.num_rows else []
            return
        self.runs.append(self._sorted(delta, hashes))
        while True:  # tiered merging: FAN_IN runs of one size class become one run of the next class
            levels = Counter(level(r) for r in self.runs)
            full = sorted(lv for lv, n in levels.items() if n >= FAN_IN)
            if not full:
                return
            merged = self._merge([r for r in self.runs if level(r) == full[0]])
            self.runs = [r for r in self.runs if level(r) != full[0]] + ([merged] if merged.rows.num_rows else [])

    @classmethod
    def of_netted(cls, key: tuple[str, ...], schema: pa.Schema, duck: Duck, rows: pa.Table) -> KeyedRuns:
        """A table holding ``rows``, already netted (each distinct row once, no zero weight): one run, hashed and
        sorted, nothing merged. Raises pyarrow's ArrowInvalid when ``rows`` do not cast to ``schema``."""
        runs = cls(key, schema, duck)
        rows = rows.select(schema.names).cast(schema)
        if rows.num_rows:
            runs.runs = [runs._sorted(rows, runs._hash(rows), True)]
        return runs

    def copy(self) -> KeyedRuns:
        """Another table holding the same rows (the runs' arrow tables are shared: a run is never changed)."""
        other = KeyedRuns(self.key, self.schema, self.duck)
        other.runs = list(self.runs)
        return other

    def held(self) -> int:
        """Rows in the runs (a row in several runs counts in each)."""
        return sum(r.rows.num_rows for r in self.runs)

    def _widen(self, delta: pa.Table) -> None:
        """A delta whose types differ from the held rows': DuckDB unifies both, and the table is rebuilt."""
        held = self.all()
        columns = data_columns(held)
        select = f"SELECT {cols_sql(columns)}, {WEIGHT}"
        merged = self.duck.consolidate(union_sql([f"{select} FROM h", f"{select} FROM d"]), columns, h=held, d=delta)
        self._typed(merged.schema)
        self.runs = [self._sorted(merged, self._hash(merged), True)] if merged.num_rows else []

    def _hash(self, rows: pa.Table) -> pa.Array:
        """A uint64 per row from its key: integer keys mixed with arrow arithmetic (one integer column: its
        value), any other key with DuckDB's ``hash``. Equal keys hash equal; different keys rarely do."""
        if not self.key:
            return pa.repeat(pa.scalar(0, pa.uint64()), rows.num_rows)
        if self.integer_key:
            hashes = None
            for k in self.key:
                part = pc.cast(pc.fill_null(pc.cast(rows[k], pa.int64()), NULL_KEY), pa.uint64(), safe=False)
                hashes = part if hashes is None else pc.add(pc.multiply(hashes, MIX), part)
            return hashes.combine_chunks() if isinstance(hashes, pa.ChunkedArray) else hashes
        hashed = self.duck.query(f"SELECT hash({cols_sql(list(self.key))}) AS {HASH} FROM t", t=rows)
        return hashed.column(0).combine_chunks()

    @staticmethod
    def _sorted(rows: pa.Table, hashes: pa.Array, netted: bool = False) -> Run:
        order = pc.sort_indices(hashes)
        return Run(rows.take(order), pc.take(hashes, order), netted)

    def _merge(self, runs: list[Run]) -> Run:
        """One run from several: equal rows' weights summed, rows netting to zero dropped, sorted again."""
        rows = pa.concat_tables([r.rows for r in runs])
        hashes = pa.chunked_array([r.hashes for r in runs], pa.uint64())
        netted = self._summed(rows.append_column(HASH, hashes))
        return self._sorted(netted.drop_columns([HASH]).cast(self.schema), netted.column(HASH).combine_chunks(), True)

    # -- reads ----------------------------------------------------------------------------------------------
    def all(self) -> pa.Table:
        """Every row, netted (merges the runs into one)."""
        if not self.runs:
            return self.schema.empty_table()
        if len(self.runs) > 1 or not self.runs[0].netted:
            merged = self._merge(self.runs)
            self.runs = [merged] if merged.rows.num_rows else []
            return merged.rows
        return self.runs[0].rows

    def lookup(self, keys: pa.Table) -> pa.Table:
        """The netted rows whose key equals a row of ``keys`` (NULL matches NULL)."""
        if not self.key:
            return self.all()
        if keys.num_rows == 0 or not self.runs:
            return self.schema.empty_table()
        key_schema = pa.schema([self.schema.field(k) for k in self.key])
        try:
            keys = keys.select(list(self.key)).cast(key_schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
            return self._matched(self.all(), keys)  # keys of another type: DuckDB compares them as SQL does
        hashes = self._hash(keys)
        wanted = pc.unique(hashes)
        found = [(run, part) for run in self.runs if (part := self._found(run, wanted)) is not None]
        if not found:
            return self.schema.empty_table()
        rows = pa.concat_tables([part.rows for _, part in found])
        if not self.arrow_match or len(wanted) != keys.num_rows:
            return self._matched(rows, keys)  # duplicate keys or a hash collision among them: DuckDB matches
        found_hashes = pa.chunked_array([part.hashes for _, part in found], pa.uint64())
        rows = rows.filter(self._same_key(rows, found_hashes, keys, hashes))
        if len(found) == 1 and found[0][0].netted:
            return rows
        return self._net(rows)

    def _net(self, rows: pa.Table) -> pa.Table:
        """Equal rows' weights summed, zero weights dropped."""
        return self._summed(rows).select(self.schema.names).cast(self.schema)

    def _summed(self, rows: pa.Table) -> pa.Table:
        """``rows`` (any columns and the weight) with equal rows' weights summed and zero weights dropped: by
        arrow's hash aggregation where its equality is SQL's (no float or nested column), else by DuckDB."""
        columns = data_columns(rows)
        if not columns or any(
            pa.types.is_floating(f.type) or pa.types.is_nested(f.type) for f in rows.schema if f.name != WEIGHT
        ):
            return self.duck.consolidate("SELECT * FROM t", columns, t=rows)
        summed = rows.group_by(columns, use_threads=False).aggregate([(WEIGHT, "sum")])
        summed = summed.filter(pc.not_equal(summed[WEIGHT + "_sum"], 0))
        return summed.rename_columns([WEIGHT if n == WEIGHT + "_sum" else n for n in summed.column_names])

    def _same_key(self, rows: pa.Table, row_hashes: pa.ChunkedArray, keys: pa.Table, hashes: pa.Array) -> pa.Array:
        """Which rows (their hashes ``row_hashes``) have exactly the key of the (single) key row with their hash,
        NULL equal to NULL."""
        index = pc.index_in(row_hashes, value_set=hashes)
        same = None
        for k in self.key:
            mine, theirs = rows[k], pc.take(keys[k], index)
            equal = pc.or_kleene(
                pc.fill_null(pc.equal(mine, theirs), False), pc.and_(pc.is_null(mine), pc.is_null(theirs))
            )
            same = equal if same is None else pc.and_(same, equal)
        return same

    @staticmethod
    def _found(run: Run, wanted: pa.Array) -> Run | None:
        """The rows of ``run`` whose hash is wanted, with their hashes: by binary search per hash, or by probing
        the whole run when the search would cost more."""
        if len(wanted) * ROWS_PER_SEARCH >= run.rows.num_rows:
            hit = pc.is_in(run.hashes, value_set=wanted)
            part = run.rows.filter(hit)
            return Run(part, pc.filter(run.hashes, hit)) if part.num_rows else None
        hashes = run.searchable()
        n = len(hashes)
        indices: list[int] = []
        for h in sorted(wanted.to_pylist()):
            i = bisect.bisect_left(hashes, h)
            j = i
            while j < n and hashes[j] == h:
                j += 1
            indices.extend(range(i, j))
        if not indices:
            return None
        taken = pa.array(indices, pa.int64())
        return Run(run.rows.take(taken), pc.take(run.hashes, taken))

    def _matched(self, rows: pa.Table, keys: pa.Table) -> pa.Table:
        on = " AND ".join(f"s.{q(k)} IS NOT DISTINCT FROM k.{q(k)}" for k in self.key)
        columns = data_columns(rows)
        found = self.duck.consolidate(f"SELECT s.* FROM s SEMI JOIN k ON {on}", columns, s=rows, k=keys)
        return found.cast(self.schema)
