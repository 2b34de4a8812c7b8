"""Iceberg merge-on-read, end to end through the real REST catalog: keyed upserts and deletes
commit a data file plus ONE position-delete file (nothing already written is rewritten), every
reader (pyiceberg, DuckDB through the catalog, Spark through the catalog) applies the deletes,
maintenance folds them back into the data files, a commit that races that fold still lands
exactly once, and ``write.update.mode = copy-on-write`` keeps rewriting files."""

from __future__ import annotations

import logging
import random
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import DataFileContent

from lakeview.ivm.commits import EPOCH, Change, Epoch
from lakeview.sql.duck import connect_catalog
from tests.writers.conftest import NAMESPACE, IcebergLake
from writers.iceberg.live_files import LiveFiles
from writers.iceberg.maintenance import maintain_iceberg
from writers.iceberg.writer import IcebergWriter
from writers.maintenance import MaintenancePolicy

SCHEMA = pa.schema([("k", pa.int64()), ("total", pa.int64())])
KEY = ("k",)
FOLD = MaintenancePolicy(keep_snapshots=None, compact_min_files=2, delete_files_max=5, orphan_min_age_ms=3_600_000)
SPARK_CATALOG = "lv_mor"


@pytest.fixture()
def lake(rest_catalog, catalog_server) -> IcebergLake:
    return IcebergLake(rest_catalog, catalog_server)


# ---------------------------------------------------------------- helpers


def change(upserts: dict[Any, int], deletes: list[Any] = ()) -> Change:  # type: ignore[assignment]
    rows = pa.table({"k": pa.array(list(upserts), pa.int64()), "total": pa.array(list(upserts.values()), pa.int64())})
    gone = pa.table({"k": pa.array(list(deletes), pa.int64())}) if deletes else None
    return Change(rows, KEY, deletes=gone)


def apply(model: dict[Any, int], upserts: dict[Any, int], deletes: list[Any] = ()) -> None:  # type: ignore[assignment]
    for k in deletes:
        model.pop(k, None)
    model.update(upserts)


def as_dict(rows: list[tuple]) -> dict[Any, int]:
    out = dict(rows)
    assert len(out) == len(rows), f"duplicate keys in {sorted(rows, key=repr)[:20]}"
    return out


def pyiceberg_rows(writer: IcebergWriter, snapshot_id: int | None = None) -> dict[Any, int]:
    table = writer.table().scan(snapshot_id=snapshot_id).to_arrow()
    return as_dict([(r["k"], r["total"]) for r in table.to_pylist()])


def duckdb_rows(lake: IcebergLake, writer: IcebergWriter, snapshot_id: int | None = None, con=None) -> dict[Any, int]:
    if con is None:
        return as_dict([tuple(r) for r in lake.read_duckdb(writer, snapshot_id)])
    # one attached connection across commits: each query must see the catalog's current snapshot
    return as_dict(con.sql(f"SELECT * FROM lake.{NAMESPACE}.{writer.identifier[1]}").fetchall())


def spark_rows(spark, catalog_server, writer: IcebergWriter) -> dict[Any, int]:
    if spark.conf.get(f"spark.sql.catalog.{SPARK_CATALOG}", None) is None:
        spark.conf.set(f"spark.sql.catalog.{SPARK_CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
        spark.conf.set(f"spark.sql.catalog.{SPARK_CATALOG}.type", "rest")
        spark.conf.set(f"spark.sql.catalog.{SPARK_CATALOG}.uri", catalog_server.uri)
        spark.conf.set(f"spark.sql.catalog.{SPARK_CATALOG}.warehouse", "lakeview")
        spark.conf.set(f"spark.sql.catalog.{SPARK_CATALOG}.cache-enabled", "false")
    name = f"{SPARK_CATALOG}.{NAMESPACE}.{writer.identifier[1]}"
    spark.sql(f"REFRESH TABLE {name}")
    return as_dict([(r["k"], r["total"]) for r in spark.sql(f"SELECT k, total FROM {name}").collect()])


def live_files(writer: IcebergWriter) -> tuple[list[str], list[str]]:
    """(data file paths, delete file paths) of the current snapshot, read fresh."""
    live = LiveFiles().live(writer.table())
    return sorted(f.file_path for f in live.data), sorted(f.file_path for f in live.delete_files)


def summary(snapshot) -> dict[str, str]:
    return {"operation": snapshot.summary.operation.value, **snapshot.summary.additional_properties}


def delete_files_added(props: dict[str, str]) -> int:
    return int(props.get("added-position-delete-files", props.get("added-delete-files", "0")))


def snapshots_of_epoch(writer: IcebergWriter, epoch: int) -> int:
    return sum(
        1 for s in writer.table().snapshots() if s.summary and s.summary.additional_properties.get(EPOCH) == str(epoch)
    )


# ---------------------------------------------------------------- 1. upserts and deletes write position deletes


def test_keyed_upserts_and_deletes_write_one_position_delete_file(
    lake, spark, catalog_server, unique_name: str
) -> None:
    writer = lake.writer(unique_name)
    writer.ensure_table(SCHEMA, KEY, {})
    assert writer.table().properties["write.update.mode"] == "merge-on-read"
    model: dict[Any, int] = {}
    rng = random.Random(7)
    initial = {k: rng.getrandbits(62) for k in range(2000)}  # incompressible: the file's size follows its rows
    first = writer.commit(Epoch(unique_name, 0, {"src": 0}), change(initial))
    apply(model, initial)
    assert first is not None
    (first_file,), no_deletes = live_files(writer)
    assert no_deletes == []

    upserts = {k: -k for k in range(100, 2000, 100)} | {k: 7 for k in (2000, 2001, 2002)}  # 19 updates, 3 inserts
    deletes = list(range(5, 1000, 100))  # 10 deletes
    second = writer.commit(Epoch(unique_name, 1, {"src": 1}), change(upserts, deletes))
    apply(model, upserts, deletes)
    assert second is not None and second.rows_deleted == 19 + 10 and second.rows_inserted == len(upserts)

    props = summary(writer.table().current_snapshot())
    assert delete_files_added(props) == 1, props
    assert props["added-data-files"] == "1", props
    assert props.get("deleted-data-files", "0") == "0" and props.get("removed-files-size", "0") == "0", props
    assert props["added-position-deletes"] == str(19 + 10), props
    data, delete_files = live_files(writer)
    assert first_file in data and len(data) == 2 and len(delete_files) == 1, (
        "the first data file is still live, untouched"
    )
    # Copy-on-write would have rewritten the whole first file; this commit wrote a small
    # data file and a small delete file.
    written, total = int(props["added-files-size"]), int(props["total-files-size"])
    first_size = total - written
    assert written * 4 < first_size, (
        f"a 32-row change wrote {written} bytes next to a {first_size}-byte file: amplification should follow the change"
    )

    assert pyiceberg_rows(writer) == model
    assert duckdb_rows(lake, writer) == model
    assert duckdb_rows(lake, writer, first.snapshot_id) == initial, "time travel to before the deletes"
    assert pyiceberg_rows(writer, first.snapshot_id) == initial
    assert spark_rows(spark, catalog_server, writer) == model


# ---------------------------------------------------------------- 2. random epochs, then a fold


def test_random_epochs_match_a_model_and_a_fold_keeps_them(lake, spark, catalog_server, unique_name: str) -> None:
    rng = random.Random(20261122)
    writer = lake.writer(unique_name)
    writer.ensure_table(SCHEMA, KEY, {})
    universe: list[Any] = [None, *range(299)]
    model: dict[Any, int] = {}
    null_epochs = 0
    con = connect_catalog(catalog_server.uri, "lakeview")
    for epoch in range(12):
        size = 150 if epoch == 0 else rng.randint(5, 40)
        touched = rng.sample(universe, size)
        if epoch % 3 == 0 and None not in touched:
            touched[rng.randrange(size)] = None  # the NULL key is upserted or deleted now and then
        cut = size if epoch == 0 else rng.randint(size // 3, size)
        if epoch == 5:
            cut = 0  # deletes only
        upserts = {k: rng.randint(-1000, 1000) for k in touched[:cut]}
        deletes = touched[cut:]  # some present, some absent (a no-op)
        if epoch == 7:
            upserts, deletes = {}, [1000, 1001]  # deletes of absent keys only: an epoch that changes nothing
        null_epochs += None in touched
        assert writer.commit(Epoch(unique_name, epoch, {"src": epoch}), change(upserts, deletes)) is not None
        apply(model, upserts, deletes)
        assert pyiceberg_rows(writer) == model, f"pyiceberg after epoch {epoch}"
        assert duckdb_rows(lake, writer, con=con) == model, f"DuckDB after epoch {epoch}"
        if epoch:  # the keys were found through the index, built once and then moved by each commit
            assert writer.timings["indexed"] and writer.live.index_builds == 1, (epoch, writer.timings)
    assert null_epochs >= 4
    assert all(snapshots_of_epoch(writer, e) == 1 for e in range(12)), "one snapshot per epoch, the no-op epoch 7 too"
    assert spark_rows(spark, catalog_server, writer) == model

    data_before, deletes_before = live_files(writer)
    assert len(deletes_before) >= FOLD.delete_files_max, (
        f"only {len(deletes_before)} delete files; the fold would not run"
    )
    report = maintain_iceberg(writer, FOLD)
    assert report.delete_files_folded == len(deletes_before), report.describe()
    data_after, deletes_after = live_files(writer)
    assert deletes_after == [], "the fold leaves no delete file in the current snapshot"
    assert len(data_after) < len(data_before), (data_before, data_after)
    current = writer.table().current_snapshot()
    assert current.summary.additional_properties.get("lakeview.maintenance") == "compact"
    assert pyiceberg_rows(writer) == model
    assert duckdb_rows(lake, writer) == model
    assert spark_rows(spark, catalog_server, writer) == model

    # The writer's cache still holds the pre-fold files and positions: the next epoch must
    # notice they moved and name positions in the rewritten files.
    present = [k for k in model][:12]
    upserts = {k: 424242 for k in present[:6]} | {1000: 1}
    deletes = present[6:]
    record = writer.commit(Epoch(unique_name, 12, {"src": 12}), change(upserts, deletes))
    apply(model, upserts, deletes)
    assert record is not None and record.rows_deleted == len(present)
    assert writer.live.index_builds == 2, "another writer's fold moved every row: the index is built again"
    _, delete_files = live_files(writer)
    assert len(delete_files) == 1
    assert pyiceberg_rows(writer) == model
    assert duckdb_rows(lake, writer) == model
    assert spark_rows(spark, catalog_server, writer) == model


# ---------------------------------------------------------------- 3. a commit racing a compaction


def seeded(lake: IcebergLake, name: str, epochs: int = 4) -> tuple[IcebergWriter, dict[Any, int]]:
    """A table of 100 keys plus ``epochs - 1`` epochs of updates: ``epochs - 1`` delete files."""
    writer = lake.writer(name)
    writer.ensure_table(SCHEMA, KEY, {})
    model: dict[Any, int] = {}
    for epoch in range(epochs):
        upserts = {k: k for k in range(100)} if epoch == 0 else {k: epoch * 1000 + k for k in range(epoch, 100, 7)}
        writer.commit(Epoch(name, epoch, {"src": epoch}), change(upserts, [50 + epoch] if epoch else []))
        apply(model, upserts, [50 + epoch] if epoch else [])
    assert len(live_files(writer)[1]) == epochs - 1
    return writer, model


def fold_now(lake: IcebergLake, name: str) -> None:
    """A maintenance pass from another writer instance (another process, as far as the first
    writer can tell) that folds every delete file into rewritten data files."""
    report = maintain_iceberg(
        lake.writer(name), MaintenancePolicy(keep_snapshots=None, compact_min_files=2, delete_files_max=1)
    )
    assert report.delete_files_folded >= 1, report.describe()


def test_commit_after_a_fold_moved_the_files_it_looked_up(lake, unique_name: str) -> None:
    writer, model = seeded(lake, unique_name)
    upserts, deletes = {3: -3, 10: -10, 500: 5}, [20, 21]
    found = writer.lookup(pa.table({"k": pa.array([*upserts, *deletes], pa.int64())}))
    assert sorted(found.column("k").to_pylist()) == [3, 10, 20, 21]  # positions now cached in the writer
    before, _ = live_files(writer)

    fold_now(lake, unique_name)
    after, folded = live_files(writer)
    assert folded == [] and not set(before) & set(after), "the fold rewrote every file the lookup read"

    commit_epoch_4(lake, writer, model, upserts, deletes)


def commit_epoch_4(
    lake: IcebergLake, writer: IcebergWriter, model: dict[Any, int], upserts: dict[Any, int], deletes: list[Any]
) -> None:
    """Commit epoch 4 (deleting 4 stored rows): one snapshot, and both readers equal the model."""
    record = writer.commit(Epoch(writer.identifier[1], 4, {"src": 4}), change(upserts, deletes))
    apply(model, upserts, deletes)
    assert record is not None and record.rows_deleted == 4
    assert snapshots_of_epoch(writer, 4) == 1
    assert pyiceberg_rows(writer) == model
    assert duckdb_rows(lake, writer) == model


class FoldAfterStaging(IcebergWriter):
    """A real writer whose first staged commit is overtaken by a real maintenance fold, run
    between writing the epoch's files (positions found) and the catalog commit."""

    def __init__(self, lake: IcebergLake, name: str) -> None:
        super().__init__(lake.catalog, NAMESPACE, name)
        self.lake = lake
        self.staged = 0

    def stage(self, table, epoch, change):
        staged = super().stage(table, epoch, change)
        self.staged += 1
        if self.staged == 1:
            fold_now(self.lake, self.identifier[1])
        return staged


def test_commit_racing_a_fold_is_refused_then_redone_exactly_once(lake, unique_name: str, caplog) -> None:
    _, model = seeded(lake, unique_name)
    writer = FoldAfterStaging(lake, unique_name)
    upserts, deletes = {3: -3, 10: -10, 500: 5}, [20, 21]
    with caplog.at_level(logging.WARNING, logger="lakeview.writers.iceberg"):
        commit_epoch_4(lake, writer, model, upserts, deletes)
    assert writer.staged == 2, "the stale attempt was refused and the epoch redone on the folded files"
    assert any("lost a race" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    history = [summary(s) for s in writer.table().snapshots()]
    assert [h.get("lakeview.maintenance") for h in history[-2:]] == ["compact", None], "fold, then the redone epoch"


def test_a_staged_delta_on_moved_files_is_refused_by_the_catalog_commit(lake, unique_name: str) -> None:
    writer, model = seeded(lake, unique_name)
    txn, _ = writer.stage(writer.table(), Epoch(unique_name, 4, {}), change({3: -3}, [20]))
    fold_now(lake, unique_name)
    head = writer.table().current_snapshot().snapshot_id
    with pytest.raises(ValidationException):
        txn.commit_transaction()
    assert writer.table().current_snapshot().snapshot_id == head, "nothing landed"
    assert pyiceberg_rows(writer) == model


# ---------------------------------------------------------------- 4. copy-on-write still rewrites


def test_copy_on_write_mode_rewrites_data_files(lake, spark, catalog_server, unique_name: str) -> None:
    writer = lake.writer(unique_name)
    writer.ensure_table(SCHEMA, KEY, {"write.update.mode": "copy-on-write"})
    assert writer.table().properties["write.update.mode"] == "copy-on-write"
    model: dict[Any, int] = {}
    initial = {k: k for k in range(500)} | {None: -1}
    first = writer.commit(Epoch(unique_name, 0, {}), change(initial))
    apply(model, initial)
    (first_file,), _ = live_files(writer)

    upserts, deletes = {1: 100, None: 0, 900: 9}, [2, 3]
    assert writer.commit(Epoch(unique_name, 1, {}), change(upserts, deletes)) is not None
    apply(model, upserts, deletes)
    props = summary(writer.table().current_snapshot())
    assert delete_files_added(props) == 0 and props.get("total-delete-files", "0") == "0", props
    assert props["deleted-data-files"] == "1", props
    data, delete_files = live_files(writer)
    assert delete_files == [] and first_file not in data
    assert all(f.content == DataFileContent.DATA for f in LiveFiles().live(writer.table()).data)

    assert pyiceberg_rows(writer) == model
    assert duckdb_rows(lake, writer) == model
    assert duckdb_rows(lake, writer, first.snapshot_id) == initial
    assert spark_rows(spark, catalog_server, writer) == model


# ---------------------------------------------------------------- 5. the writer compacts within its commits


def test_writer_folds_deletes_within_its_commits_and_each_epoch_change_is_exact(lake, unique_name: str) -> None:
    """With thresholds passed, an epoch's own snapshot rewrites the files with deletes (and the
    small ones) and drops every delete file: the table never holds more than
    ``delete_files_max - 1`` delete files after a commit, readers equal the model after every
    epoch, and the change a view over this one reads (snapshot_change) is exactly the model's."""
    from writers.snapshot_diff import WEIGHT, snapshot_change

    policy = MaintenancePolicy(keep_snapshots=None, small_file_bytes=1 << 30, compact_min_files=4, delete_files_max=3)
    writer = IcebergWriter(lake.catalog, NAMESPACE, unique_name, compaction=policy)
    writer.ensure_table(SCHEMA, KEY, {})
    rng = random.Random(11)
    model: dict[Any, int] = {}
    folds = 0
    for epoch in range(14):
        before = dict(model)
        upserts = {rng.choice([*range(60), None]): rng.randrange(1000) for _ in range(rng.randrange(1, 12))}
        deletes = (
            [k for k in rng.sample(sorted(model, key=repr), min(len(model), rng.randrange(0, 4)))] if model else []
        )
        deletes = [k for k in deletes if k not in upserts]
        record = writer.commit(Epoch(unique_name, epoch, {"n": epoch}), change(upserts, deletes))
        apply(model, upserts, deletes)
        assert record is not None
        data, delete_files = live_files(writer)
        assert len(delete_files) < policy.delete_files_max, f"epoch {epoch}: {len(delete_files)} delete files"
        assert len(data) <= policy.compact_min_files + policy.delete_files_max, f"epoch {epoch}: {len(data)} data files"
        folds += writer.timings.get("delete_files_folded", 0) > 0
        assert writer.live.index_builds == (1 if epoch else 0), (
            "the writer's own folds move the index, never rebuild it"
        )
        assert pyiceberg_rows(writer) == model, f"epoch {epoch}"
        assert duckdb_rows(lake, writer) == model, f"epoch {epoch}"
        z = snapshot_change(writer, record.snapshot_id).to_pylist()  # type: ignore[arg-type]
        expected = {
            **{(k, v): -1 for k, v in before.items() if model.get(k, object()) != v},
            **{(k, v): 1 for k, v in model.items() if before.get(k, object()) != v},
        }
        assert {(r["k"], r["total"]): r[WEIGHT] for r in z} == expected, f"epoch {epoch}"
    assert folds >= 3, "the thresholds were passed several times"
    assert snapshots_of_epoch(writer, 13) == 1


# ---------------------------------------------------------------- 6. keys the index can and cannot hold


@pytest.mark.parametrize(
    ("key_type", "indexed"),
    [(pa.float64(), False), (pa.struct([("n", pa.int64()), ("s", pa.string())]), True)],
    ids=["float-key-probes-rows", "two-column-key-indexed"],
)
def test_keys_outside_the_index_are_found_by_probing_and_two_column_keys_by_the_index(
    lake, unique_name: str, key_type: pa.DataType, indexed: bool
) -> None:
    """A float key (NaN and -0.0 do not hash as the writers compare) is found by probing every
    live row; a two-column key through the index. Either way the table equals a model after
    every epoch, NULL key parts included."""
    two = pa.types.is_struct(key_type)
    key = ("n", "s") if two else ("x",)
    schema = (
        pa.schema([("n", pa.int64()), ("s", pa.string()), ("total", pa.int64())])
        if two
        else pa.schema([("x", pa.float64()), ("total", pa.int64())])
    )
    name = f"{unique_name}_{'pair' if two else 'float'}"
    writer = lake.writer(name)
    writer.ensure_table(schema, key, {})
    universe: list[Any] = (
        [(n, s) for n in [None, *range(12)] for s in [None, "a", "b"]]
        if two
        else [None, -1.5, *[i / 4 for i in range(40)]]
    )
    rng = random.Random(5)
    model: dict[Any, int] = {}

    def table_of(keys: list[Any], totals: list[int] | None) -> pa.Table:
        columns = (
            {"n": pa.array([k[0] for k in keys], pa.int64()), "s": pa.array([k[1] for k in keys], pa.string())}
            if two
            else {"x": pa.array(keys, pa.float64())}
        )
        return pa.table({**columns, **({"total": pa.array(totals, pa.int64())} if totals is not None else {})})

    for epoch in range(8):
        touched = rng.sample(universe, 30 if epoch == 0 else rng.randint(3, 15))
        cut = len(touched) if epoch == 0 else rng.randint(1, len(touched))
        upserts = {k: rng.randint(0, 99) for k in touched[:cut]}
        deletes = touched[cut:]
        rows = table_of(list(upserts), list(upserts.values()))
        writer.commit(
            Epoch(name, epoch, {"n": epoch}), Change(rows, key, deletes=table_of(deletes, None) if deletes else None)
        )
        apply(model, upserts, deletes)
        stored = writer.table().scan().to_arrow().to_pylist()
        got = {((r["n"], r["s"]) if two else r["x"]): r["total"] for r in stored}
        assert len(got) == len(stored) and got == model, f"epoch {epoch}"
        if epoch:
            assert writer.timings["indexed"] is indexed, writer.timings


def test_a_commit_after_a_lookup_by_a_prefix_of_the_key_takes_its_rows_from_the_lookup(lake, unique_name: str) -> None:
    """A value multiset's table (keyed by group and value) is looked up by its group alone each epoch, then
    committed by its whole key (values upserted and deleted): the lookup finds every row of the groups asked
    for, and the commit names the replaced rows from what the lookup found (the same snapshot), so no index
    of the whole key is built nor probed; the table equals a model after every epoch."""
    schema = pa.schema([("g", pa.int64()), ("v", pa.int64()), ("n", pa.int64())])
    writer = lake.writer(unique_name)
    writer.ensure_table(schema, ("g", "v"), {})
    rng = random.Random(9)
    model: dict[tuple[int, int], int] = {}
    for epoch in range(8):
        groups = sorted(rng.sample(range(20), 5))
        if epoch:
            found = writer.lookup(pa.table({"g": pa.array(groups, pa.int64())})).to_pylist()
            assert sorted((r["g"], r["v"], r["n"]) for r in found) == sorted(
                (g, v, n) for (g, v), n in model.items() if g in groups
            ), epoch
        upserts = {(g, rng.randrange(6)): rng.randint(1, 9) for g in groups for _ in range(3)}
        held = [k for k in model if k[0] in groups and k not in upserts]
        deletes = rng.sample(held, len(held) // 2)
        rows = pa.table(
            {
                "g": pa.array([g for g, _ in upserts], pa.int64()),
                "v": pa.array([v for _, v in upserts], pa.int64()),
                "n": pa.array(list(upserts.values()), pa.int64()),
            }
        )
        gone = pa.table(
            {"g": pa.array([g for g, _ in deletes], pa.int64()), "v": pa.array([v for _, v in deletes], pa.int64())}
        )
        writer.commit(
            Epoch(unique_name, epoch, {"n": epoch}), Change(rows, ("g", "v"), deletes=gone if deletes else None)
        )
        apply(model, upserts, deletes)
        stored = {(r["g"], r["v"]): r["n"] for r in writer.table().scan().to_arrow().to_pylist()}
        assert stored == model, epoch
    assert writer.live.index_builds == 1  # the group alone, once (not unique); the whole key never needed one
