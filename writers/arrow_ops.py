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
    con = duckdb.connect()
    try:
        con.register("r", rows)
        con.register("k", keys.select(list(key)) if key else keys)
        sql = f"SELECT r.* FROM r WHERE {op} (SELECT 1 FROM k WHERE {_key_match(key, 'k', 'r')})"
        return con.execute(sql).to_arrow_table().cast(rows.schema)
    finally:
        con.close()
