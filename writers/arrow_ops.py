"""Null-safe key operations on Arrow tables, done in DuckDB (pyarrow joins never match nulls)."""

from __future__ import annotations

import duckdb
import pyarrow as pa


def _key_match(key: tuple[str, ...], left: str, right: str) -> str:
    return " AND ".join(f'{left}."{k}" IS NOT DISTINCT FROM {right}."{k}"' for k in key) or "TRUE"


def rows_with_keys(rows: pa.Table, keys: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """The rows of ``rows`` whose key is in ``keys``."""
    return _filter(rows, keys, key, "EXISTS")


def rows_without_keys(rows: pa.Table, keys: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """The rows of ``rows`` whose key is not in ``keys``."""
    return _filter(rows, keys, key, "NOT EXISTS")


def _filter(rows: pa.Table, keys: pa.Table, key: tuple[str, ...], op: str) -> pa.Table:
    if not key:  # the empty key (a one-row global aggregate): any key matches every row
        return rows if (keys.num_rows > 0) == (op == "EXISTS") else rows.schema.empty_table()
    con = duckdb.connect()
    try:
        con.register("r", rows)
        con.register("k", keys.select(list(key)) if key else keys)
        sql = f"SELECT r.* FROM r WHERE {op} (SELECT 1 FROM k WHERE {_key_match(key, 'k', 'r')})"
        return con.execute(sql).to_arrow_table().cast(rows.schema)
    finally:
        con.close()


def rows_at_most(rows: pa.Table, column: str, bound_us: int) -> pa.Table:
    """The rows whose timestamp ``column`` is at or before ``bound_us`` (µs since the Unix epoch)."""
    con = duckdb.connect()
    try:
        con.register("r", rows)
        return con.execute(f'SELECT * FROM r WHERE epoch_us("{column}") <= {int(bound_us)}').to_arrow_table().cast(rows.schema)
    finally:
        con.close()
