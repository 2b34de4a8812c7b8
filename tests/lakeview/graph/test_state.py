"""The in-memory state store: what a lookup by key returns after many applies (runs merged or not) equals
DuckDB's netting of every delta applied, for integer, string, multi-column and NULL keys."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from lakeview.graph import WEIGHT, MemoryStateStore, StateTable

SCHEMA = pa.schema(
    [("k", pa.int64()), ("s", pa.string()), ("x", pa.float64()), ("v", pa.int64()), (WEIGHT, pa.int64())]
)


def rows(table: pa.Table | None) -> Counter:
    out: Counter = Counter()
    for r in (table or SCHEMA.empty_table()).to_pylist():
        w = r.pop(WEIGHT, 1)
        out[tuple(sorted(r.items()))] += w
    return Counter({k: w for k, w in out.items() if w})


def random_delta(r: random.Random, held: list[dict], n: int) -> list[dict]:
    """Inserts of new rows and deletes of held ones (a valid Z-set change)."""
    delta = []
    for _ in range(n):
        if held and r.random() < 0.3:
            row = held.pop(r.randrange(len(held)))
            delta.append({**row, WEIGHT: -1})
        else:
            row = {
                "k": r.choice([None, *range(40)]),
                "s": r.choice([None, "a", "b", "ü"]),
                "x": r.choice([None, 0.5, -1.0, 2.25]),
                "v": r.randrange(5),
            }
            held.append(row)
            delta.append({**row, WEIGHT: 1})
    return delta


@pytest.mark.parametrize("key", [("k",), ("s",), ("k", "s"), ("x",), ("s", "x", "k"), ()])
def test_lookup_after_many_applies_equals_the_netted_rows_under_those_keys(key):
    r = random.Random(hash(key) & 0xFFFF)
    store, table = MemoryStateStore(), StateTable("t", key, "rows")
    store.apply(table, SCHEMA.empty_table())
    held: list[dict] = []
    for epoch in range(40):
        # deltas of very different sizes, so runs of several size classes are merged
        delta = pa.Table.from_pylist(random_delta(r, held, r.choice([1, 3, 40, 300, 1_500])), schema=SCHEMA)
        store.apply(table, delta)
        if not key:
            assert rows(store.lookup(table, None)) == rows(pa.Table.from_pylist(held, schema=SCHEMA.remove(4)))
            continue
        probe = [{c: row[c] for c in key} for row in r.sample(held, min(len(held), 7))] + [
            {c: SCHEMA.field(c).type == pa.string() and "zz" or 99 for c in key}
        ]
        keys = pa.Table.from_pylist(probe, schema=pa.schema([SCHEMA.field(c) for c in key]))
        got = store.lookup(table, keys)

        wanted = {tuple(p[c] for c in key) for p in probe}  # tuples: None equals None, as NULL keys match
        expected = [row for row in held if tuple(row[c] for c in key) in wanted]
        assert rows(got) == rows(pa.Table.from_pylist(expected, schema=SCHEMA.remove(4))), f"epoch {epoch}"
    assert store.rows(table) == len(rows(pa.Table.from_pylist(held, schema=SCHEMA.remove(4))))


def test_lookup_with_keys_of_another_integer_type_finds_the_same_rows():
    store, table = MemoryStateStore(), StateTable("t", ("k",), "rows")
    store.apply(table, pa.table({"k": pa.array([1, 2, None], pa.int64()), WEIGHT: [1, 1, 1]}))
    keys = pa.table({"k": pa.array([2, None], pa.int32())})
    assert sorted(store.lookup(table, keys).to_pylist(), key=str) == [{"k": 2, WEIGHT: 1}, {"k": None, WEIGHT: 1}]
