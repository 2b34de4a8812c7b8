"""The change of a committed snapshot, derived from the table itself (Iceberg manifests /
Delta add-remove actions), equals the change actually made: for each epoch, the table before
plus the derived Z-set equals the table after, with untouched rows of rewritten files cancelled."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from lakeview.ivm.commits import Change, Epoch
from writers.snapshot_diff import WEIGHT, commits_after, snapshot_change, snapshot_rows

SCHEMA = pa.schema([("k", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])


def as_counter(table: pa.Table) -> Counter:
    return Counter(tuple(r[c] for c in SCHEMA.names) for r in table.to_pylist())


def zset(table: pa.Table) -> Counter:
    out: Counter = Counter()
    for r in table.to_pylist():
        out[tuple(r[c] for c in SCHEMA.names)] += r[WEIGHT]
    return out


def test_derived_change_equals_each_epochs_actual_change(lake, unique_name: str) -> None:
    writer = lake.writer(unique_name)
    writer.ensure_table(SCHEMA, ("k",), {})
    epochs = [
        Change(pa.table({"k": [1, 2, 3, None], "name": ["a", "b", "c", "n"], "amount": [1.5, 2.0, 3.0, 0.1]}), ("k",)),
        # an update of 2, a delete of 3 and of the null key, an insert of 4: 1 stays (rewritten file)
        Change(
            pa.table({"k": [2, 4], "name": ["b2", "d"], "amount": [2.5, None]}),
            ("k",),
            deletes=pa.table({"k": pa.array([3, None], pa.int64())}),
        ),
        Change(pa.table({"k": [1], "name": ["a"], "amount": [1.5]}), ("k",)),  # an identical upsert: no change
    ]
    records = []
    for number, change in enumerate(epochs):
        records.append(writer.commit(Epoch(unique_name, number, {"src": number}), change))
    assert all(r is not None for r in records)

    first = snapshot_change(writer, records[0].snapshot_id)
    assert zset(first) == Counter({(1, "a", 1.5): 1, (2, "b", 2.0): 1, (3, "c", 3.0): 1, (None, "n", 0.1): 1})
    second = snapshot_change(writer, records[1].snapshot_id)
    assert zset(second) == Counter(
        {(2, "b", 2.0): -1, (2, "b2", 2.5): 1, (3, "c", 3.0): -1, (None, "n", 0.1): -1, (4, "d", None): 1}
    )
    assert snapshot_change(writer, records[2].snapshot_id).num_rows == 0, "rewritten but unchanged rows cancel"

    # before + change == after, at every epoch
    before: Counter = Counter()
    for record in records:
        after = as_counter(snapshot_rows(writer, record.snapshot_id))
        integrated = before + Counter()
        for row, weight in zset(snapshot_change(writer, record.snapshot_id)).items():
            integrated[row] += weight
        assert +integrated == after and all(v >= 0 for v in integrated.values())
        before = after

    assert [r.epoch for r in commits_after(writer, None)] == [0, 1, 2]
    assert [r.epoch for r in commits_after(writer, 0)] == [1, 2]
    assert commits_after(writer, 2) == []


def test_appends_are_all_additions(lake, unique_name: str) -> None:
    writer = lake.writer(unique_name)
    writer.ensure_table(SCHEMA, None, {})
    record = writer.commit(
        Epoch(unique_name, 0, {}), Change(pa.table({"k": [1, 1], "name": ["x", "x"], "amount": [1.0, 1.0]}))
    )
    assert zset(snapshot_change(writer, record.snapshot_id)) == Counter({(1, "x", 1.0): 2}), (
        "duplicates keep their multiplicity"
    )
