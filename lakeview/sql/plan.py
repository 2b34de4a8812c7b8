"""A view's SQL parsed: the one statement it must be (:func:`parse_statement`) and the line a node of it is on
(:func:`line_of`), for the operator graph's plan (:mod:`lakeview.sql.graph_plan`) and the load checks."""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from lakeview.errors import UnsupportedSQLError
from lakeview.sql import windows

WEIGHT = "__lv_w"  # the Z-set weight column (+1 insert, -1 delete)
DIALECTS = ("spark", "duckdb", "trino")


def parse_statement(sql: str, dialect: str = "spark") -> exp.Expression:
    """The one statement of a view's SQL (``dialect``: spark, duckdb or trino).
    Raises :class:`UnsupportedSQLError` when it does not parse or is not exactly one statement."""
    if dialect not in DIALECTS:
        raise UnsupportedSQLError(f"unknown SQL dialect {dialect!r}; use one of {', '.join(DIALECTS)}")
    try:
        statements = sqlglot.parse(windows.mark_windows(sql) if dialect == "spark" else sql, read=dialect)
    except ParseError as exc:
        raise UnsupportedSQLError(f"cannot parse SQL: {str(exc).splitlines()[0]}") from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise UnsupportedSQLError(f"expected exactly one SELECT statement, got {len(statements)}")
    return statements[0]


def line_of(sql: str, node: exp.Expression | None) -> int | None:
    """The 1-based line of ``node`` in ``sql`` (from sqlglot's token positions)."""
    if node is None:
        return None
    for n in node.walk():
        meta = getattr(n, "meta", None) or {}
        if "line" in meta:
            return int(meta["line"])
    text = node.sql("spark").split(" ")[0].lower()
    for number, line in enumerate(sql.splitlines(), start=1):
        if text and text in line.lower():
            return number
    return None
