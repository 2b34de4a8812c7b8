"""DuckDB with the offline extension wheels loaded by path (never downloaded)."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import duckdb
import pyarrow as pa

from lakeview.errors import SetupError

DUCKDB_VERSION = "1.5.5"


def extension_path(name: str) -> Path:
    """Path of ``<name>.duckdb_extension`` inside the ``duckdb-extension-<name>`` wheel."""
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        raise SetupError(f"DuckDB extension {name!r} is missing: pip install duckdb-extension-{name}=={DUCKDB_VERSION}")
    root = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(root.glob(f"extensions/*/{name}.duckdb_extension"))
    if not found:
        raise SetupError(f"no {name}.duckdb_extension file inside {root}")
    return found[0]


def connect(*extensions: str) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the named extensions loaded (avro before iceberg)."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for name in extensions:
        con.execute(f"LOAD '{extension_path(name)}'")
    return con


_local = threading.local()
_shared: list[duckdb.DuckDBPyConnection] = []
_shared_lock = threading.Lock()


def cursor() -> duckdb.DuckDBPyConnection:
    """A connection of its own (its registered tables are its own) to the process's one in-memory database for
    small queries over arrow tables (a graph's operators, its state store, load checks). Opening a database
    costs 20-50 ms; a connection to an open one under 1 ms. One thread per query: for these few rows, threads
    cost more than they give."""
    with _shared_lock:
        if not _shared:
            _shared.append(duckdb.connect(config={"threads": 1}))
        return _shared[0].cursor()


def arrow_sql(sql: str, **tables: pa.Table) -> pa.Table:
    """DuckDB over Arrow tables (registered under their keyword names) on one connection per
    thread: an epoch runs a dozen small queries, and opening a database per query cost more
    than the queries."""
    con = getattr(_local, "con", None)
    if con is None:
        con = _local.con = duckdb.connect()
    try:
        for name, table in tables.items():
            con.register(name, table)
        return con.execute(sql).to_arrow_table()
    finally:
        for name in tables:
            con.unregister(name)


def attach_sql(catalog_uri: str, warehouse: str, alias: str = "lake") -> str:
    """The ATTACH statement that points DuckDB at Lakeview's REST catalog."""
    return f"ATTACH '{warehouse}' AS {alias} (TYPE iceberg, ENDPOINT '{catalog_uri}', AUTHORIZATION_TYPE 'none')"


def connect_catalog(catalog_uri: str, warehouse: str, alias: str = "lake") -> duckdb.DuckDBPyConnection:
    """DuckDB attached to the catalog, so ``SELECT * FROM lake.<namespace>.<view>`` works."""
    con = connect("avro", "httpfs", "iceberg")
    con.execute(attach_sql(catalog_uri, warehouse, alias))
    return con
