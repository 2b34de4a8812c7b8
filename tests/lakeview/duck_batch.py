"""DuckDB standing in for Spark's per-batch SQL in the maintenance property tests."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import sqlglot

from lakeview.ivm.changefeed import OP, latest_sql, operation_sql
from lakeview.config.models import ChangeFeedConfig


def duck(sql: str, **tables: pa.Table) -> pa.Table:
    """``sql`` (DuckDB dialect) run over ``tables``, each registered under its keyword name."""
    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    return con.execute(sql).to_arrow_table()


def spark_sql(sql: str) -> str:
    """Spark SQL transpiled to DuckDB's dialect."""
    return sqlglot.transpile(sql, read="spark", write="duckdb")[0]


def latest_changes(feed: ChangeFeedConfig, batch: pa.Table) -> pa.Table:
    """A change-feed batch as the pipeline hands it to maintenance: each row tagged with its
    operation, the latest row per key kept (with the row-number column ``__lv_rn``)."""
    tagged = duck(f"SELECT *, {spark_sql(operation_sql(feed))} AS {OP} FROM b", b=batch)
    return duck(spark_sql(latest_sql(feed, "t")), t=tagged)


def feed_source_toml(name: str, schema: str, key: str) -> str:
    """``[sources.NAME]``: a change feed of JSON files under ``landing/NAME``, its operation in
    ``op`` (I, U, D) and its sequence in ``seq``."""
    return f"""
[sources.{name}]
format = "json"
path = "landing/{name}"
schema = "{schema}"
[sources.{name}.changes]
operation = "op"
key = ["{key}"]
sequence = "seq"
insert = ["I"]
update = ["U"]
delete = ["D"]
"""
