"""A commit's pointer swaps on plain DBAPI connections: the compare-and-swap of every table in one transaction.

The swap is the one database write of a commit. Through SQLAlchemy it cost more CPU than the statement
itself (connection checkout, statement compilation lookup, events, and on PostgreSQL a ``ROLLBACK`` round
trip when the connection went back to its pool); here it is a prepared-once SQL string on a kept
connection in autocommit mode: one table's swap is one ``UPDATE`` (one round trip: the statement is its own
transaction), several tables' are ``BEGIN`` → one ``UPDATE`` per table → ``COMMIT``. Connections are pooled
per process (at most :data:`POOL_SIZE`; a commit waits for one rather than opening more) and checked before
use by the store's one policy for kept connections (kept_connections.py).
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine

from catalog_api.store import kept_connections
from lakeview import errors

POOL_SIZE = 8
WAIT_SECONDS = 30.0
_SWAP = (
    "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? "
    "WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ? "
    "AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
)


class SwapConflict(Exception):
    """A compare-and-swap matched no row: the named table changed (or went away) since it was read."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class PointerSwaps:
    """Swaps table pointers atomically on a small pool of raw connections to the store's database."""

    def __init__(self, engine: Engine, catalog_name: str) -> None:
        self.engine, self.catalog_name = engine, catalog_name
        sqlite = engine.dialect.name == "sqlite"
        self._begin = "BEGIN IMMEDIATE" if sqlite else "BEGIN"  # SQLite: take the write lock now, no upgrade deadlock
        marker = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        self._sql = _SWAP.replace("?", marker)
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._slots: queue.Queue[None] = queue.Queue(POOL_SIZE)
        for _ in range(POOL_SIZE):
            self._slots.put(None)

    def swap(self, swaps: Sequence[tuple[str, str, str, str]]) -> None:
        """``(namespace key, name, expected location, new location)`` per table, all or none.

        Raises SwapConflict (nothing changed), CatalogUnavailableError (the database refused or failed;
        on a failed COMMIT the outcome is unknown, as for any 5xx on commit)."""
        try:
            self._slots.get(timeout=WAIT_SECONDS)
        except queue.Empty:
            raise errors.CatalogUnavailableError("every catalog store connection is busy; retry") from None
        connection = None
        try:
            connection = self._take()
            cursor = connection.cursor()
            try:
                self._run(cursor, swaps)
            finally:
                with contextlib.suppress(Exception):
                    cursor.close()
        except self.engine.dialect.loaded_dbapi.Error as exc:
            if connection is not None:
                kept_connections.close_quietly(connection)
                connection = None  # broken or busy: a fresh one next time
            raise errors.CatalogUnavailableError(f"the catalog store failed the commit, retry: {exc}") from None
        finally:
            if connection is not None:
                self._idle.put(connection)
            self._slots.put(None)

    def _run(self, cursor: Any, swaps: Sequence[tuple[str, str, str, str]]) -> None:
        if len(swaps) == 1:  # one statement in autocommit mode: atomic on its own, one round trip
            namespace, name, expected, new = swaps[0]
            cursor.execute(self._sql, (new, expected, self.catalog_name, namespace, name, expected))
            if cursor.rowcount != 1:
                raise SwapConflict(0)
            return
        cursor.execute(self._begin)
        try:
            for index, (namespace, name, expected, new) in enumerate(swaps):
                cursor.execute(self._sql, (new, expected, self.catalog_name, namespace, name, expected))
                if cursor.rowcount != 1:
                    raise SwapConflict(index)
        except BaseException:
            with contextlib.suppress(Exception):
                cursor.execute("ROLLBACK")
            raise
        cursor.execute("COMMIT")

    def _take(self) -> Any:
        """An idle kept connection the server has not dropped, else a new one."""
        while True:
            try:
                connection = self._idle.get_nowait()
            except queue.Empty:
                return kept_connections.connect(self.engine)
            if not kept_connections.dropped(connection):
                return connection
            kept_connections.close_quietly(connection)

    def close(self) -> None:
        while True:
            try:
                kept_connections.close_quietly(self._idle.get_nowait())
            except queue.Empty:
                return
