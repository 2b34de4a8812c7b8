"""A commit's pointer swaps on plain DBAPI connections: the compare-and-swap of every table in one transaction.

The swap is the one database write of a commit. Through SQLAlchemy it cost more CPU than the statement
itself (connection checkout, statement compilation lookup, events, and on PostgreSQL a ``ROLLBACK`` round
trip when the connection went back to its pool); here it is a prepared-once SQL string on a kept
connection, ``BEGIN`` → one ``UPDATE`` per table → ``COMMIT``. Connections are pooled per process (at most
:data:`POOL_SIZE`; a commit waits for one rather than opening more).
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine

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


class _StaleConnection(Exception):
    """A kept connection failed before the swap wrote anything (the database dropped it)."""


class PointerSwaps:
    """Swaps table pointers atomically on a small pool of raw connections to the store's database."""

    def __init__(self, engine: Engine, catalog_name: str) -> None:
        self.engine, self.catalog_name = engine, catalog_name
        self.sqlite = engine.dialect.name == "sqlite"
        marker = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        self._sql = _SWAP.replace("?", marker)
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._slots = queue.Queue(POOL_SIZE)
        for _ in range(POOL_SIZE):
            self._slots.put(None)

    def swap(self, swaps: Sequence[tuple[str, str, str, str]]) -> None:
        """``(namespace key, name, expected location, new location)`` per table, all or none.

        Raises SwapConflict (nothing changed), CatalogUnavailableError (the database refused or failed;
        on a failed COMMIT the outcome is unknown, as for any 5xx on commit). A kept connection the database
        dropped (a restart of PostgreSQL) fails before anything is written: the swap is run once more on a
        new connection instead of answering 503."""
        try:
            self._swap_once(swaps, reuse=True)
        except _StaleConnection:
            self._swap_once(swaps, reuse=False)

    def _swap_once(self, swaps: Sequence[tuple[str, str, str, str]], reuse: bool) -> None:
        try:
            self._slots.get(timeout=WAIT_SECONDS)
        except queue.Empty:
            raise errors.CatalogUnavailableError("every catalog store connection is busy; retry") from None
        connection, reused, committing = None, False, False
        try:
            if reuse:
                with contextlib.suppress(queue.Empty):
                    connection, reused = self._idle.get_nowait(), True
            if connection is None:
                connection = self._connect()
            cursor = connection.cursor()
            try:
                if self.sqlite:
                    cursor.execute("BEGIN IMMEDIATE")  # take the write lock now: no deadlock on upgrade
                for index, (namespace, name, expected, new) in enumerate(swaps):
                    cursor.execute(self._sql, (new, expected, self.catalog_name, namespace, name, expected))
                    if cursor.rowcount != 1:
                        raise SwapConflict(index)
                committing = True
                connection.commit()
            except BaseException:
                with contextlib.suppress(Exception):
                    connection.rollback()
                raise
            finally:
                with contextlib.suppress(Exception):
                    cursor.close()
        except self.engine.dialect.loaded_dbapi.Error as exc:
            with contextlib.suppress(Exception):
                connection.close()  # type: ignore[union-attr]
            connection = None  # broken or busy: a fresh one next time
            if reused and not committing:
                raise _StaleConnection from exc
            raise errors.CatalogUnavailableError(f"the catalog store failed the commit, retry: {exc}") from None
        finally:
            if connection is not None:
                self._idle.put(connection)
            self._slots.put(None)

    def _connect(self) -> Any:
        cargs, cparams = self.engine.dialect.create_connect_args(self.engine.url)
        if self.sqlite:
            connection = sqlite3.connect(*cargs, **{**cparams, "isolation_level": None, "check_same_thread": False})
            for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=30000"):  # as the store's pool
                connection.execute(f"PRAGMA {pragma}")
            return connection
        return self.engine.dialect.loaded_dbapi.connect(*cargs, **{"connect_timeout": 3, **cparams})

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return
            except Exception:
                continue
