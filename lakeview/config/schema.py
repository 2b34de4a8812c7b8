"""Source schemas: a Spark DDL string ("id BIGINT, name STRING") parsed once with sqlglot."""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError


@dataclass(frozen=True)
class Column:
    name: str
    type: exp.DataType

    def type_sql(self, dialect: str) -> str:
        return self.type.sql(dialect=dialect)


def parse_ddl(ddl: str) -> tuple[Column, ...]:
    """Parse a column list in Spark DDL. Raises ``ValueError`` naming the problem."""
    if not ddl or not ddl.strip():
        raise ValueError("schema is empty; give columns like 'order_id BIGINT, quantity INT'")
    try:
        create = sqlglot.parse_one(f"CREATE TABLE t ({ddl})", read="spark")
    except ParseError as exc:
        raise ValueError(f"{ddl!r} is not a Spark DDL column list ({_first_line(exc)})") from None
    schema = create.this if isinstance(create, exp.Create) else None
    if not isinstance(schema, exp.Schema):
        raise ValueError(f"{ddl!r} is not a Spark DDL column list")
    columns = []
    for definition in schema.expressions:
        if not isinstance(definition, exp.ColumnDef) or definition.args.get("kind") is None:
            raise ValueError(f"{definition.sql('spark')!r} in the schema needs a name and a type")
        kind = definition.args["kind"]
        if kind.this == exp.DataType.Type.USERDEFINED:
            raise ValueError(f"unknown type {kind.sql('spark')!r} for column {definition.name!r}")
        columns.append(Column(definition.name, kind))
    names = [c.name.lower() for c in columns]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate column(s) in schema: {', '.join(duplicates)}")
    return tuple(columns)


def duckdb_columns(ddl: str) -> dict[str, str]:
    """The schema as DuckDB's ``read_json(columns=...)`` wants it."""
    return {c.name: c.type_sql("duckdb") for c in parse_ddl(ddl)}


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0]
