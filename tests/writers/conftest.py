"""One behaviour suite for every writer: ``lake`` yields each table format behind one small
adapter (make a writer, read it back natively, from DuckDB, and at an older snapshot)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_api.server import CatalogServer
from tests.duck_readers import catalog_reader, delta_reader
from writers.base import SnapshotWriter
from writers.delta.writer import DeltaWriter, history_of
from writers.iceberg.writer import IcebergWriter

NAMESPACE = "writer_tests"


class IcebergLake:
    format = "iceberg"

    def __init__(self, catalog, server: CatalogServer) -> None:
        self.catalog = catalog
        self.server = server

    def writer(self, name: str) -> IcebergWriter:
        return IcebergWriter(self.catalog, NAMESPACE, name)

    def read(self, writer: SnapshotWriter, snapshot_id: int | None = None) -> pa.Table:
        return writer.table().scan(snapshot_id=snapshot_id).to_arrow()  # type: ignore[attr-defined]

    def read_duckdb(self, writer: SnapshotWriter, snapshot_id: int | None = None) -> list[tuple]:
        con = catalog_reader(self.server.uri, "lakeview")
        at = f" AT (VERSION => {snapshot_id})" if snapshot_id is not None else ""
        return con.sql(f"SELECT * FROM lake.{NAMESPACE}.{writer.identifier[1]}{at}").fetchall()  # type: ignore[attr-defined]

    def commits(self, writer: SnapshotWriter) -> int:
        return len(writer.table().snapshots())  # type: ignore[attr-defined]


class DeltaLake:
    format = "delta"

    def __init__(self, root: Path) -> None:
        self.root = root

    def writer(self, name: str) -> DeltaWriter:
        return DeltaWriter(str(self.root / NAMESPACE / name), name)

    def read(self, writer: SnapshotWriter, snapshot_id: int | None = None) -> pa.Table:
        return writer.table(snapshot_id).to_pyarrow_table()  # type: ignore[attr-defined]

    def read_duckdb(self, writer: SnapshotWriter, snapshot_id: int | None = None) -> list[tuple]:
        con = delta_reader()
        at = f", version => {snapshot_id}" if snapshot_id is not None else ""
        return con.sql(f"SELECT * FROM delta_scan('{writer.location}'{at})").fetchall()  # type: ignore[attr-defined]

    def commits(self, writer: SnapshotWriter) -> int:
        return len(history_of(writer.table()))  # type: ignore[attr-defined]


@pytest.fixture(params=["iceberg", "delta"])
def lake(
    request: pytest.FixtureRequest, rest_catalog, catalog_server: CatalogServer, lake_dir: Path
) -> Iterator[IcebergLake | DeltaLake]:
    if request.param == "iceberg":
        yield IcebergLake(rest_catalog, catalog_server)
    else:
        yield DeltaLake(lake_dir / "delta")
