"""A committer process for the kill test: appends row ``e`` as epoch ``e``, forever, resuming
after the table's last epoch. ``python -m tests.writers.commit_loop iceberg URI NAME`` or
``... delta LOCATION NAME``."""

from __future__ import annotations

import sys

import pyarrow as pa

from lakeview.ivm.commits import Change, Epoch
from writers.base import SnapshotWriter


def open_writer(fmt: str, where: str, name: str) -> SnapshotWriter:
    if fmt == "delta":
        from writers.delta.writer import DeltaWriter

        return DeltaWriter(where, name)
    from pyiceberg.catalog.rest import RestCatalog

    from writers.iceberg.writer import IcebergWriter

    return IcebergWriter(RestCatalog("loop", uri=where, warehouse="lakeview"), "fault_tests", name)


def main() -> None:
    fmt, where, name = sys.argv[1:4]
    writer = open_writer(fmt, where, name)
    last = writer.last_commit()
    epoch = 0 if last is None else last.epoch + 1
    while True:
        writer.commit(Epoch(name, epoch, {"n": epoch}), Change(pa.table({"k": [epoch], "total": [epoch]})))
        epoch += 1


if __name__ == "__main__":
    main()
