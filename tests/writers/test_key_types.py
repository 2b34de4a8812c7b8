"""Keyed upserts and deletes over every key type users have, through every writer: the second
epoch looks up the stored rows by key (a Delta table reads strings back as ``string_view``)
and replaces exactly the touched rows, null keys included."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from lakeview.ivm.commits import Change, Epoch

UTC = dt.UTC
# type -> (first epoch's keys, one key updated at epoch 1, one key deleted at epoch 1, one new key)
KEYS = {
    "string": (pa.string(), ["a", "", "é日本", None], "", "a", "zz"),
    "string_no_null": (pa.string(), ["a", "b", "c"], "b", "a", "d"),  # files without nulls: other statistics
    "int32": (pa.int32(), [1, -2, 0, None], 0, 1, 7),
    "bool": (pa.bool_(), [True, False, None], False, True, None),
    "decimal38": (
        pa.decimal128(38, 10),
        [decimal.Decimal("1234567890123456789012345678.0123456789"), decimal.Decimal("-1"), None],
        decimal.Decimal("-1"),
        None,
        decimal.Decimal("0.5"),
    ),
    "double": (pa.float64(), [1.5, -0.0, float("inf"), float("-inf"), None], float("inf"), 1.5, 2.5),
    "binary": (pa.binary(), [b"\x00\xff", b"", None], b"", b"\x00\xff", b"new"),
    "date": (
        pa.date32(),
        [dt.date(2024, 1, 1), dt.date(1969, 12, 31), None],
        dt.date(1969, 12, 31),
        None,
        dt.date(2030, 5, 5),
    ),
    "timestamp_tz": (
        pa.timestamp("us", tz="UTC"),
        [dt.datetime(2024, 1, 1, 12, tzinfo=UTC), dt.datetime(1999, 1, 1, tzinfo=UTC), None],
        dt.datetime(1999, 1, 1, tzinfo=UTC),
        None,
        dt.datetime(2025, 2, 2, 2, 2, 2, 123456, tzinfo=UTC),
    ),
    "timestamp_ntz": (
        pa.timestamp("us"),
        [dt.datetime(2024, 1, 1, 12), dt.datetime(2000, 6, 1), None],
        dt.datetime(2000, 6, 1),
        dt.datetime(2024, 1, 1, 12),
        dt.datetime(2031, 1, 1),
    ),
}


def _sorted(rows: list[dict]) -> list[tuple]:
    return sorted(((_instant(r["k"]), r["total"]) for r in rows), key=repr)


def _instant(value: object) -> object:
    """A timestamp as naive UTC (one writer reads a timestamp column back with a UTC zone)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


@pytest.mark.parametrize("kind", list(KEYS))
def test_keyed_changes_by_key_type(lake, unique_name: str, kind: str) -> None:
    key_type, first, updated, deleted, new = KEYS[kind]
    schema = pa.schema([("k", key_type), ("total", pa.int64())])
    writer = lake.writer(unique_name)
    writer.ensure_table(schema, ("k",), {})
    writer.commit(
        Epoch(unique_name, 0, {}),
        Change(pa.table({"k": first, "total": list(range(len(first)))}, schema=schema), ("k",)),
    )
    change = Change(
        pa.table({"k": [updated, new], "total": [100, 200]}, schema=schema),
        ("k",),
        deletes=pa.table({"k": pa.array([deleted], key_type)}),
    )
    found = writer.lookup(change.touched_keys())
    assert _sorted(found.to_pylist()) == _sorted(
        [{"k": k, "total": i} for i, k in enumerate(first) if k in (updated, deleted, new)]
    )
    writer.commit(Epoch(unique_name, 1, {}), change)

    expected = {k: i for i, k in enumerate(first)}
    expected.pop(deleted)
    expected[updated] = 100
    expected[new] = 200
    want = _sorted([{"k": k, "total": v} for k, v in expected.items()])
    assert _sorted(lake.read(writer).to_pylist()) == want
    # Every stored row found by its key in the files the MERGE wrote, null key included.
    everything = writer.lookup(pa.table({"k": pa.array(list(expected), key_type)}))
    assert _sorted(everything.to_pylist()) == want
    # A third epoch reads the table written by the second (the string_view round trip again).
    writer.commit(Epoch(unique_name, 2, {}), Change(pa.table({"k": [new], "total": [300]}, schema=schema), ("k",)))
    expected[new] = 300
    assert _sorted(lake.read(writer).to_pylist()) == _sorted([{"k": k, "total": v} for k, v in expected.items()])
