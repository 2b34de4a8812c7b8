"""Grouped Iceberg views commit in one multi-table catalog transaction: every member's snapshot
carries the same epoch and frontier, a lost race moves no member, and DuckDB joining the two
views at the snapshots of one epoch (while commits run) always sees one point in time."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from catalog_api.server import CatalogServer
from lakeview.ivm.commits import Change, Epoch
from lakeview.sql.duck import connect_catalog
from writers.graph_state import Replacement
from writers.iceberg.group import IcebergGroupWriter
from writers.iceberg.writer import IcebergWriter

SUMS = pa.schema([("k", pa.int64()), ("total", pa.int64())])
COUNTS = pa.schema([("k", pa.int64()), ("orders", pa.int64())])


def snapshot_of_epoch(table, epoch: int) -> int:
    for snapshot in table.snapshots():
        if snapshot.summary and snapshot.summary.additional_properties.get("lakeview.epoch") == str(epoch):
            return snapshot.snapshot_id
    raise AssertionError(f"no snapshot for epoch {epoch}")


def test_grouped_views_commit_atomically_with_one_frontier(
    rest_catalog, catalog_server: CatalogServer, unique_name: str
) -> None:
    sums = IcebergWriter(rest_catalog, "group_tests", f"{unique_name}_sums")
    counts = IcebergWriter(rest_catalog, "group_tests", f"{unique_name}_counts")
    sums.ensure_table(SUMS, ("k",), {})
    counts.ensure_table(COUNTS, ("k",), {})
    group = IcebergGroupWriter(rest_catalog, "orders_by_k", {"sums": sums, "counts": counts})
    group.members = {sums.identifier[1]: sums, counts.identifier[1]: counts}
    s_name, c_name = sums.identifier[1], counts.identifier[1]

    # Every order has quantity 10, so a consistent pair of snapshots has total == 10 * orders.
    state: dict[int, int] = {}
    problems: list[str] = []
    reads: list[int] = []
    done, read = threading.Event(), threading.Event()

    def reader() -> None:
        try:
            read_pinned_joins()
        except Exception as exc:
            problems.append(repr(exc))

    def read_pinned_joins() -> None:
        con = connect_catalog(catalog_server.uri, "lakeview")
        while not done.is_set():
            epoch = group.last_epoch()
            if epoch is None:
                continue
            s_id = snapshot_of_epoch(sums.table(), epoch)
            c_id = snapshot_of_epoch(counts.table(), epoch)
            bad = con.sql(
                f"WITH s AS (SELECT * FROM lake.group_tests.{s_name} AT (VERSION => {s_id})), "
                f"c AS (SELECT * FROM lake.group_tests.{c_name} AT (VERSION => {c_id})) "
                "SELECT s.k, s.total, c.orders FROM s FULL JOIN c ON s.k = c.k "
                "WHERE s.total IS DISTINCT FROM c.orders * 10"
            ).fetchall()
            reads.append(epoch)
            read.set()
            if bad:
                problems.append(f"epoch {epoch}: {bad}")

    watcher = threading.Thread(target=reader)
    watcher.start()
    try:
        for epoch in range(6):
            if epoch == 3:  # the reader reads while commits still run (they may outpace its first read)
                read.wait(timeout=120)
            keys = [epoch % 3, 10 + epoch]
            for k in keys:
                state[k] = state.get(k, 0) + 1
            records = group.commit(
                Epoch("orders_by_k", epoch, {"orders": {"log_offset": epoch}}),
                {
                    s_name: Change(pa.table({"k": keys, "total": [state[k] * 10 for k in keys]}, schema=SUMS), ("k",)),
                    c_name: Change(pa.table({"k": keys, "orders": [state[k] for k in keys]}, schema=COUNTS), ("k",)),
                },
            )
            assert records is not None and {r.epoch for r in records.values()} == {epoch}
            assert len({json_frontier(r.frontier) for r in records.values()}) == 1, "one frontier for the group"
    finally:
        done.set()
        watcher.join(timeout=60)
    assert not problems, problems
    assert reads, "the reader joined the views while commits ran"
    assert (
        group.commit(
            Epoch("orders_by_k", 5, {}), {s_name: Change(pa.table({"k": [1], "total": [1]}, schema=SUMS), ("k",))}
        )
        is None
    )
    assert len(sums.table().snapshots()) == len(counts.table().snapshots()) == 6

    # A lost race on one member moves neither: the transaction is rejected as a whole, then retried.
    before = (sums.table().current_snapshot().snapshot_id, counts.table().current_snapshot().snapshot_id)
    stale = sums.table()
    sums.commit(
        Epoch(s_name, 6, {}), Change(pa.table({"k": [99], "total": [990]}, schema=SUMS), ("k",))
    )  # a concurrent committer
    txn_sums, _ = sums.stage(
        stale, Epoch(s_name, 7, {}), Change(pa.table({"k": [1], "total": [0]}, schema=SUMS), ("k",))
    )
    txn_counts, _ = counts.stage(
        counts.table(), Epoch(c_name, 7, {}), Change(pa.table({"k": [1], "orders": [0]}, schema=COUNTS), ("k",))
    )
    from pyiceberg.table import CommitTableRequest, TableIdentifier

    requests = [
        CommitTableRequest(
            identifier=TableIdentifier(namespace=["group_tests"], name=n),
            requirements=t._requirements,
            updates=t._updates,
        )
        for n, t in ((s_name, txn_sums), (c_name, txn_counts))
    ]
    assert group._post(requests) == 409
    assert counts.table().current_snapshot().snapshot_id == before[1], "the other member did not move"
    assert sums.table().current_snapshot().snapshot_id != before[0]  # only the concurrent commit landed


def json_frontier(frontier: dict) -> str:
    import json

    return json.dumps(frontier, sort_keys=True)


def test_group_rejects_non_members(rest_catalog, unique_name: str) -> None:
    from lakeview.errors import WriterError

    writer = IcebergWriter(rest_catalog, "group_tests", unique_name)
    writer.ensure_table(SUMS, ("k",), {})
    group = IcebergGroupWriter(rest_catalog, "g", {unique_name: writer})
    with pytest.raises(WriterError, match="not members"):
        group.commit(Epoch("g", 0, {}), {"other": Change(pa.table({"k": [1], "total": [1]}, schema=SUMS), ("k",))})


@pytest.mark.parametrize(
    ("other", "problem"),
    [
        ({"format": "delta"}, "grouped views must be Iceberg"),
        ({"cadence": "5s"}, "a group shares one cadence"),
        ({"sql": "SELECT a FROM p"}, "a group shares its sources"),
        ({"sql": "SELECT o.a, p.a AS pa FROM o JOIN p ON o.a = p.a"}, "a group's one query reads one source"),
        ({"sql": "SELECT a, s FROM v"}, "grouped views read a source"),
    ],
)
def test_group_members_must_share_format_cadence_and_sources(other: dict, problem: str) -> None:
    from lakeview.errors import ConfigError
    from lakeview.project import parse_project

    sources = {
        "o": {"format": "json", "path": "o", "schema": "a INT, b INT"},
        "p": {"format": "json", "path": "p", "schema": "a INT"},
    }
    views = {
        "v": {"sql": "SELECT a, SUM(b) AS s FROM o GROUP BY a", "group": "g", "cadence": "60s"},
        "w": {"sql": "SELECT a, COUNT(*) AS n FROM o GROUP BY a", "group": "g", "cadence": "1m"},
    }
    parse_project({"sources": sources, "views": views})  # same sources and cadence: fine
    views["w"].update(other)
    with pytest.raises(ConfigError, match=problem) as raised:
        parse_project({"sources": sources, "views": views})
    assert raised.value.key == "views.w.group"


def test_explain_says_who_a_grouped_view_commits_with(tmp_path) -> None:
    from typer.testing import CliRunner

    from lakeview.cli.main import app

    (tmp_path / "lakeview.toml").write_text(
        '[sources.o]\nformat = "json"\npath = "o"\nschema = "a INT, b INT"\n'
        '[views.v]\nsql = "SELECT a, SUM(b) AS s FROM o GROUP BY a"\ngroup = "g"\n'
        '[views.w]\nsql = "SELECT a, MAX(b) AS m FROM o GROUP BY a"\ngroup = "g"\n'
    )
    out = CliRunner().invoke(app, ["explain", "w", "-p", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "group g: one streaming query keeps w, v;" in out.output
    assert "ONE catalog transaction" in out.output and "refreshes the whole group" in out.output


def test_replacements_in_a_row_leave_only_the_last_rows_for_every_reader(
    rest_catalog, catalog_server: CatalogServer, unique_name: str
) -> None:
    """A member written whole each epoch (a fold, a small view): each replacement removes the files the one before
    it added (remembered, not read back), also after another writer committed in between (then read back), and
    DuckDB and pyiceberg read exactly the last epoch's rows, the snapshots' summaries counting what went."""
    table_name = f"{unique_name}_whole"
    member = IcebergWriter(rest_catalog, "group_tests", table_name)
    member.ensure_table(SUMS, ("k",), {})
    group = IcebergGroupWriter(rest_catalog, "whole", {table_name: member})
    expected: list[tuple[int, int]] = []
    for epoch in range(5):
        if epoch == 3:  # another writer appends a row between two replacements: the next one removes it too
            member.table().append(pa.table({"k": [99], "total": [99]}, schema=SUMS))
        before = len(expected) + (1 if epoch == 3 else 0)
        expected = [(k, epoch * 100 + k) for k in range(epoch + 2)]
        rows = pa.table({"k": [k for k, _ in expected], "total": [t for _, t in expected]}, schema=SUMS)
        group.commit(Epoch("whole", epoch, {}), {table_name: Replacement(rows=rows)})
        summary = member.table().current_snapshot().summary
        assert (int(summary["added-records"]), int(summary["deleted-records"] or 0)) == (len(expected), before)
        assert sorted(member.table().scan().to_arrow().to_pylist(), key=lambda r: r["k"]) == [
            {"k": k, "total": t} for k, t in expected
        ]
        con = connect_catalog(catalog_server.uri, "lakeview")
        assert con.sql(f"SELECT k, total FROM lake.group_tests.{table_name} ORDER BY k").fetchall() == expected
    assert member.table().current_snapshot().summary["total-data-files"] == "1"
