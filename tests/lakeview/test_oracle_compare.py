"""The oracle's comparison: a multiset by column name, tolerant of float residue, and of a
timestamp being an instant on one side (the view's timestamptz) and UTC wall-clock time on the
other (a recompute over naive source timestamps)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from lakeview.ivm.oracle import compare


def test_instant_and_utc_wall_clock_compare_equal_but_other_times_do_not() -> None:
    noon = dt.datetime(2024, 1, 1, 12)
    view = pa.table({"k": [1], "t": pa.array([noon], pa.timestamp("us", tz="UTC"))})
    assert compare(view, pa.table({"t": pa.array([noon], pa.timestamp("us")), "k": [1]})).equal
    later = compare(view, pa.table({"k": [1], "t": pa.array([noon + dt.timedelta(hours=1)], pa.timestamp("us"))}))
    assert not later.equal and len(later.missing) == 1 and len(later.unexpected) == 1


def test_duplicates_count_and_float_residue_is_ignored() -> None:
    got = pa.table({"k": [1, 1], "x": [0.1 + 0.2, 0.3]})
    assert compare(got, pa.table({"k": [1, 1], "x": [0.3, 0.3]})).equal
    assert not compare(got, pa.table({"k": [1], "x": [0.3]})).equal
