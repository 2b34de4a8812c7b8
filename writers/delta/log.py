"""A Delta table's commit infos, each with the version it was committed as.

Not ``DeltaTable.history()``: delta-rs 1.6.6 reads the commit infos down from the newest version
in storage but numbers them down from the version the table object has loaded, so a table loaded
before a commit landed gets every entry numbered one too low (the chaos soak saw each Delta epoch
at two versions, and a frontier read beside the previous version's rows). Here each commit info
is read from its own log file, ``_delta_log/<version>.json``, counting down from the loaded
version: a version's number and its commit info always agree, and a table object pinned at a
version sees nothing newer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Any

import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler

PAGE = 16  # log files read at once (one GET each)


def commit_infos(table: DeltaTable, limit: int | None = None) -> list[dict[str, Any]]:
    """The commit info of each version of ``table`` as loaded, newest first, at most ``limit``,
    each with its ``version``; stops where the log was cleaned (behind a checkpoint)."""
    return list(islice(iter_commit_infos(table), limit))


def iter_commit_infos(table: DeltaTable) -> Iterator[dict[str, Any]]:
    """:func:`commit_infos`, read a page of log files at a time as the caller asks for more.

    Raises OSError when the storage fails (a missing file ends the log instead)."""
    # The table's own storage (as DeltaTable.to_pyarrow_dataset builds it): same credentials, root.
    fs = pafs.PyFileSystem(DeltaStorageHandler.from_table(table._table, table._storage_options))
    newest = table.version()

    def read(version: int) -> dict[str, Any] | None:
        try:
            with fs.open_input_stream(f"_delta_log/{version:020d}.json") as stream:
                lines = stream.read().decode().splitlines()
        except FileNotFoundError:
            return None
        actions = (json.loads(line) for line in lines if line.strip())
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        return {**info, "version": version}

    with ThreadPoolExecutor(PAGE, thread_name_prefix="delta-log") as pool:
        top, size = newest, 1  # the newest alone first: most callers want only the last commit
        while top >= 0:
            for info in pool.map(read, range(top, max(top - size, -1), -1)):
                if info is None:
                    return
                yield info
            top, size = top - size, PAGE
