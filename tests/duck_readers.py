"""DuckDB readers for the tests, each database made once per run: loading the avro, httpfs and iceberg (or
the delta) extensions into a new DuckDB costs 0.2-0.3 s of CPU every time (measured: connect("avro",
"iceberg") 212 ms, connect("delta") 259 ms, where a connection to an existing database takes under 1 ms),
and tests read their views back after every epoch. A reader is a new connection to a database that has the
extensions loaded (and, for a catalog, the catalog attached as ``lake``) once. Each query is a transaction
of its own that loads the table's metadata from the catalog again, as a fresh reader does, so a reader sees
the newest snapshot. Only for catalogs that serve the whole run (the session's ``catalog_server``): a
later server on the same port would be another catalog behind the same URI."""

from __future__ import annotations

import threading
from collections.abc import Callable

import duckdb

from lakeview.sql.duck import attach_sql, connect

_lock = threading.Lock()
_databases: dict[tuple[str, ...], duckdb.DuckDBPyConnection] = {}


def _reader(key: tuple[str, ...], make: Callable[[], duckdb.DuckDBPyConnection]) -> duckdb.DuckDBPyConnection:
    with _lock:
        if key not in _databases:
            _databases[key] = make()
        return _databases[key].cursor()


def delta_reader() -> duckdb.DuckDBPyConnection:
    """A connection with the delta extension loaded: ``SELECT * FROM delta_scan('<table path>')``."""
    return _reader(("delta",), lambda: connect("delta"))


def catalog_reader(catalog_uri: str, warehouse: str) -> duckdb.DuckDBPyConnection:
    """A connection that reads the run-long catalog at ``catalog_uri``: ``SELECT * FROM lake.<namespace>.<view>``."""

    def attached() -> duckdb.DuckDBPyConnection:
        con = connect("avro", "httpfs", "iceberg")
        con.execute(attach_sql(catalog_uri, warehouse))
        return con

    return _reader(("catalog", catalog_uri, warehouse), attached)
