"""Z-sets: a pyarrow Table plus an integer weight column (+1 insert, -1 delete), evaluated with DuckDB.

An update is a delete of the old row (-1) plus an insert of the new one (+1). Every operator's rule is a
SQL statement over Z-sets that DuckDB runs on arrow tables in memory, so expression semantics (NULLs,
casts, CASE, collations) are exactly DuckDB's.
"""

from __future__ import annotations

import pyarrow as pa

from lakeview.sql.duck import arrow_sql, cursor

WEIGHT = "__lv_w"  # Lakeview's reserved prefix: a user column may have any other name


def summed(zset: pa.Table) -> pa.Table:
    """A Z-set (columns plus ``__lv_w``) with identical rows summed (NULLs equal) and rows
    whose weights cancel dropped; same columns and types."""
    cols = ", ".join(q(n) for n in zset.column_names if n != WEIGHT)
    sql = f"SELECT {cols}, CAST(SUM({WEIGHT}) AS INTEGER) AS {WEIGHT} FROM z GROUP BY ALL HAVING SUM({WEIGHT}) <> 0"
    return arrow_sql(sql, z=zset).select(zset.column_names).cast(zset.schema)


def q(name: str) -> str:
    """Quote an identifier for DuckDB."""
    return '"' + name.replace('"', '""') + '"'


def cols_sql(columns: list[str], prefix: str = "") -> str:
    """A comma list of quoted columns, each optionally qualified by a table alias."""
    return ", ".join(f"{prefix}{q(c)}" for c in columns)


def expand_sql(table: str) -> str:
    """A subquery that repeats each row of a positive Z-set by its weight (so SQL aggregates see a bag)."""
    return f"(SELECT * EXCLUDE ({WEIGHT}, __lv_i) FROM (SELECT *, unnest(range({WEIGHT})) AS __lv_i FROM {table}))"


class Duck:
    """One in-memory DuckDB connection that runs an operator's rule over named arrow tables."""

    def __init__(self) -> None:
        self.con = cursor()
        self.queries = 0

    def query(self, sql: str, **tables: pa.Table) -> pa.Table:
        """Run ``sql`` with each keyword registered as a table of that name; return the result as arrow."""
        for name, table in tables.items():
            self.con.register(name, table)
        try:
            self.queries += 1
            return self.con.execute(sql).to_arrow_table()
        finally:
            for name in tables:
                self.con.unregister(name)

    def consolidate(self, sql: str, columns: list[str], **tables: pa.Table) -> pa.Table:
        """Run ``sql`` (rows with a weight) and sum the weights of equal rows, dropping rows that net to 0."""
        if not columns:
            wrapped = f"SELECT CAST(SUM({WEIGHT}) AS BIGINT) AS {WEIGHT} FROM ({sql}) HAVING SUM({WEIGHT}) <> 0"
        else:
            wrapped = (
                f"SELECT {cols_sql(columns)}, CAST(SUM({WEIGHT}) AS BIGINT) AS {WEIGHT} FROM ({sql}) "
                f"GROUP BY ALL HAVING SUM({WEIGHT}) <> 0"
            )
        return self.query(wrapped, **tables)


def union_sql(parts: list[str]) -> str:
    """UNION ALL of several SELECTs (by position)."""
    return " UNION ALL ".join(f"({p})" for p in parts)


def negate_sql(table: str, columns: list[str]) -> str:
    """The Z-set with every weight negated."""
    return f"SELECT {cols_sql(columns)}, -{WEIGHT} AS {WEIGHT} FROM {table}"


def data_columns(table: pa.Table) -> list[str]:
    """The columns of a Z-set other than its weight."""
    return [n for n in table.column_names if n != WEIGHT]
