"""Source schemas: a Spark DDL string ("id BIGINT, name STRING") parsed once with sqlglot."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

# Every column Lakeview adds (weights, counts, state) starts with this, so a user column never collides.
RESERVED_PREFIX = "__lv_"


T = exp.DataType.Type
# The types Lakeview keeps in every role: what Spark 3.5, Iceberg, Delta and DuckDB all hold.
SCALAR_TYPES = frozenset(
    {T.BOOLEAN, T.TINYINT, T.SMALLINT, T.INT, T.BIGINT, T.FLOAT, T.DOUBLE, T.DECIMAL, T.TEXT, T.VARCHAR, T.CHAR}
    | {T.BINARY, T.DATE, T.TIMESTAMP, T.TIMESTAMPTZ, T.TIMESTAMPNTZ, T.TIMESTAMPLTZ}
)
NESTED_TYPES = frozenset({T.ARRAY, T.MAP, T.STRUCT})  # passed through only: never a key nor aggregated
SUPPORTED_TYPES = (
    "BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL(p,s), STRING, VARCHAR(n), CHAR(n), BINARY, "
    "DATE, TIMESTAMP, TIMESTAMP_NTZ, TIMESTAMP_LTZ, and ARRAY / MAP / STRUCT of those (passed through only)"
)
_INSTEAD = {  # what to declare instead of a type no role can hold
    "INTERVAL": "Iceberg and Delta tables cannot store intervals; declare BIGINT (microseconds) or STRING",
    "TIME": "Spark 3.5 has no TIME type (it would read as a TIMESTAMP); declare STRING or BIGINT (microseconds)",
    "VARIANT": "Spark 3.5 has no VARIANT type; declare STRING (JSON text) or a STRUCT",
}


def unsupported_type(kind: exp.DataType) -> str | None:
    """The part of ``kind`` no role can hold (e.g. ``INTERVAL DAY``), or None."""
    if not isinstance(kind, exp.DataType) or not isinstance(kind.this, T):
        return kind.sql("spark") if kind is not None else "?"  # INTERVAL DAY TO SECOND parses as an Interval
    if kind.this in NESTED_TYPES:
        for child in kind.expressions:
            inner = child.args.get("kind") if isinstance(child, exp.ColumnDef) else child
            if (found := unsupported_type(inner)) is not None:
                return found
        return None
    return None if kind.this in SCALAR_TYPES else kind.this.name  # its own name: Spark's SQL may rename it


def is_nested(kind: exp.DataType) -> bool:
    return isinstance(kind, exp.DataType) and kind.this in NESTED_TYPES


@dataclass(frozen=True)
class Column:
    name: str
    type: exp.DataType

    def type_sql(self, dialect: str) -> str:
        return self.type.sql(dialect=dialect)


@lru_cache(maxsize=512)  # read every epoch (a source's declared columns): parsed once
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
        if (bad := unsupported_type(kind)) is not None:
            why = next((v for k, v in _INSTEAD.items() if bad.upper().startswith(k)), f"supported: {SUPPORTED_TYPES}")
            raise ValueError(
                f"column {definition.name!r} has type {bad}, which Lakeview cannot handle in any role "
                f"(key, aggregated value or passed through): {why}"
            )
        columns.append(Column(definition.name, kind))
    names = [c.name.lower() for c in columns]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate column(s) in schema: {', '.join(duplicates)}")
    return tuple(columns)


def reserved_column(ddl: str) -> str | None:
    """What is wrong when a user's schema names a column like Lakeview's own (``__lv_...``), or
    None. Checked at load only: Lakeview's sources over a view's change files carry ``__lv_w``."""
    for column in parse_ddl(ddl):
        if column.name.lower().startswith(RESERVED_PREFIX):
            return (
                f"column {column.name!r}: names starting with {RESERVED_PREFIX!r} are reserved for Lakeview's "
                "internal columns; rename it (e.g. in the files, or with a view over the source)"
            )
    return None


def duckdb_columns(ddl: str) -> dict[str, str]:
    """The schema as DuckDB's ``read_json(columns=...)`` wants it."""
    return {c.name: c.type_sql("duckdb") for c in parse_ddl(ddl)}


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0]
