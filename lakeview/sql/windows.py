"""Event-time tumbling and hopping windows: Spark SQL's ``window(ts, size[, slide])``.

A windowed view is kept by the operator graph: :func:`inline` writes each SELECT's window where it
stands, its bounds as expressions of the event time (aligned to the Unix epoch, ``start <= ts < end``,
rows with a NULL event time in none, like Spark's), a hopping window as one row per offset, so the
graph and DuckDB's recompute read the same windows.

Accepted forms (``window`` in GROUP BY, its bounds selected by name)::

    SELECT window(ts, '10 minutes').start AS window_start, window(ts, '10 minutes').end AS window_end, ...
    FROM orders GROUP BY window(ts, '10 minutes'), ...
    SELECT window.start AS window_start, window.end AS window_end, ... GROUP BY window(ts, '10 minutes', '5 minutes'), ...
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import sqlglot
from pydantic import BaseModel, ConfigDict
from sqlglot import exp

from lakeview.errors import UnsupportedSQLError

FUNCTION = "__lv_window"  # how window( is spelled for sqlglot, which parses WINDOW as a keyword
OFFSETS, OFFSET = "__lv_o", "__lv_k"  # a hopping window's offsets in the graph: VALUES (0), ..., (n-1)
# quoted text (left alone) or a call of window(
_CALL = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`[^`]*`)|(?<![\w.])window\s*\(""", re.IGNORECASE)
_UNITS = {
    "microsecond": 1, "millisecond": 1_000, "second": 1_000_000, "minute": 60_000_000,
    "hour": 3_600_000_000, "day": 86_400_000_000, "week": 604_800_000_000,
}  # fmt: skip
_PART = re.compile(r"(\d+)\s*(microsecond|millisecond|second|minute|hour|day|week)s?", re.IGNORECASE)
NEAREST = "GROUP BY window(ts, '10 minutes'[, '5 minutes']), ... with SELECT window(ts, ...).start AS window_start"


def mark_windows(sql: str) -> str:
    """``window(`` renamed so sqlglot parses it as a function (it takes WINDOW for a clause)."""
    return _CALL.sub(lambda m: m.group(1) or f"{FUNCTION}(", sql)


def parse_interval(text: str) -> int:
    """Microseconds of a Spark interval string like '10 minutes', '1 hour 30 minutes', '500 milliseconds'.
    Raises ValueError when it is not one."""
    body = re.sub(r"^\s*interval\s+", "", text.strip(), flags=re.IGNORECASE)
    parts = _PART.findall(body)
    if not parts or _PART.sub("", body).strip():
        raise ValueError(f"{text!r} is not an interval; use e.g. '10 minutes', '1 hour', '30 seconds'")
    return sum(int(n) * _UNITS[unit.lower()] for n, unit in parts)


class EventWindow(BaseModel):
    """A view's event-time window: which column, how long, how far apart."""

    model_config = ConfigDict(frozen=True)
    time_column: str  # Spark SQL of the event-time column
    size: str  # as written, e.g. '10 minutes'
    slide: str | None = None  # as written; None for a tumbling window
    size_us: int
    slide_us: int

    @property
    def is_hopping(self) -> bool:
        return self.slide_us != self.size_us

    @property
    def windows_per_row(self) -> int:
        return math.ceil(self.size_us / self.slide_us)


def _is_call(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.this).lower() == FUNCTION


def inline(tree: exp.Expression, at: Callable[[exp.Expression, str, str], str]) -> exp.Expression:
    """``tree`` (a query, changed in place) with each SELECT's event-time window computed where it stands, as
    the operator graph and DuckDB's recompute read it: the window's bounds become expressions of the event time
    (``start``: the time less its distance from the last window start, epoch-aligned; ``end``: start + size),
    the window in GROUP BY becomes those two keys, a row with a NULL event time is filtered out, and a hopping
    window adds ``CROSS JOIN (VALUES (0), ..., (n-1)) AS __lv_o(__lv_k)`` as the SELECT's last join: each row
    once per window offset k, kept where the k-th window back still holds it (Spark's Expand and Filter)."""
    outputs = _output_selects(tree)
    for select in reversed(list(tree.find_all(exp.Select))):  # innermost first: each sees only its own calls
        found = _checked(select, at)
        if found is None:
            continue
        call, window = found
        if any(select is o for o in outputs) and not any(_bounds(item) for item in select.expressions):
            raise UnsupportedSQLError(
                at(
                    call,
                    f"GROUP BY {_spark(call)} without the window's bounds in the SELECT list gives one row per window "
                    "that nothing tells apart; select window_start and/or window_end",
                    f"SELECT {_spark(call)}.start AS window_start, {_spark(call)}.end AS window_end, ...",
                )
            )
        ts = call.expressions[0]
        # microseconds from the newest window start back to the event time (floor mod: also before 1970)
        back = _spark_sql(f"((unix_micros(__lv_t) % {window.slide_us}) + {window.slide_us}) % {window.slide_us}", ts)
        conditions = [_spark_sql("__lv_t IS NOT NULL", ts)]
        if window.is_hopping:
            offsets = ", ".join(f"({k})" for k in range(window.windows_per_row))
            select.append(
                "joins",
                sqlglot.parse_one(f"SELECT 1 CROSS JOIN (VALUES {offsets}) AS {OFFSETS}({OFFSET})", read="spark").args[
                    "joins"
                ][0],
            )
            back = _spark_sql(f"({back.sql('spark')}) + {OFFSETS}.{OFFSET} * {window.slide_us}", ts)
            conditions.append(_spark_sql(f"{back.sql('spark')} < {window.size_us}", ts))
        start = _shifted(ts, _spark_sql(f"-({back.sql('spark')})", ts))
        end = _shifted(ts, _spark_sql(f"{window.size_us} - ({back.sql('spark')})", ts))
        for node in _bounds(select):
            node.replace((start if node.name.lower() == "start" else end).copy())
        group = select.args["group"]
        group.set(
            "expressions", [k for g in group.expressions for k in ([start.copy(), end.copy()] if _is_call(g) else [g])]
        )
        where = select.args.get("where")
        select.set("where", exp.Where(this=exp.and_(*([where.this] if where else []), *conditions)))
    return tree


def _output_selects(tree: exp.Expression) -> list[exp.Select]:
    """The SELECTs whose rows are the view's rows: the query's, or each branch of its UNION."""
    if isinstance(tree, exp.SetOperation):
        return _output_selects(tree.this) + _output_selects(tree.expression)
    if isinstance(tree, exp.Subquery):
        return _output_selects(tree.this)
    return [tree] if isinstance(tree, exp.Select) else []


def _spark_sql(template: str, ts: exp.Expression) -> exp.Expression:
    """``template`` (Spark SQL) parsed, with ``__lv_t`` standing for the event-time column ``ts``."""
    return sqlglot.parse_one(template, read="spark").transform(
        lambda n: ts.copy() if isinstance(n, exp.Column) and n.name == "__lv_t" and not n.table else n
    )


def _shifted(ts: exp.Expression, micros: exp.Expression) -> exp.Expression:
    """``ts`` moved by ``micros`` microseconds, in the event time's own type (TIMESTAMP or TIMESTAMPTZ)."""
    return exp.TimestampAdd(this=ts.copy(), expression=micros, unit=exp.var("MICROSECOND"))


def _bounds(tree: exp.Expression) -> list[exp.Expression]:
    """The nodes selecting a window's bounds: ``window(...).start`` / ``.end`` and ``window.start`` / ``.end``."""
    return [
        node
        for node in list(tree.walk())
        if isinstance(node, exp.Dot)
        and _is_call(node.this)
        and node.name.lower() in ("start", "end")
        or isinstance(node, exp.Column)
        and node.table.lower() == "window"
        and node.name.lower() in ("start", "end")
    ]


def _checked(
    tree: exp.Select, at: Callable[[exp.Expression, str, str], str]
) -> tuple[exp.Anonymous, EventWindow] | None:
    """The SELECT's window() in GROUP BY and the window it makes, or None when it has none. Raises
    UnsupportedSQLError for a form Spark would not group by or Lakeview does not keep."""
    for node in [n for item in tree.expressions for n in item.walk()] + list(tree.walk()):  # the SELECT list first
        if isinstance(node, exp.Anonymous) and str(node.this).lower() == "session_window":
            raise UnsupportedSQLError(
                at(
                    node,
                    "session windows (session_window) are not supported",
                    "a tumbling window: GROUP BY window(ts, '10 minutes')",
                )
            )
    calls = [n for n in tree.find_all(exp.Anonymous) if _is_call(n)]
    refs = [c for c in tree.find_all(exp.Column) if c.table.lower() == "window" and c.name.lower() in ("start", "end")]
    if not calls and not refs:
        return None
    group = tree.args.get("group")
    grouped = [g for g in (group.expressions if group else []) if _is_call(g)]
    if not grouped:
        node = calls[0] if calls else refs[0]
        raise UnsupportedSQLError(
            at(node, f"{_spark(node)} needs GROUP BY window(...) (an event-time window groups rows)", NEAREST)
        )
    if len(grouped) > 1:
        raise UnsupportedSQLError(at(grouped[1], "more than one window() in GROUP BY", "one window(ts, size[, slide])"))
    call = grouped[0]
    window = _window_of(call, at)
    for other in calls:
        if other is call:
            continue
        if other.sql("spark") != call.sql("spark"):
            raise UnsupportedSQLError(
                at(
                    other,
                    f"{_spark(other)} differs from GROUP BY {_spark(call)}",
                    "the same window(...) in SELECT and GROUP BY, or window.start / window.end",
                )
            )
        parent = other.parent
        if not (isinstance(parent, exp.Dot) and parent.name.lower() in ("start", "end")):
            raise UnsupportedSQLError(
                at(
                    other,
                    f"select the window's bounds, not the window struct {_spark(other)}",
                    f"{_spark(other)}.start AS window_start, {_spark(other)}.end AS window_end",
                )
            )
    for clause in ("where", "having"):
        node = tree.args.get(clause)
        if node is not None and (
            any(_is_call(n) for n in node.walk())
            or any(isinstance(n, exp.Column) and n.table.lower() == "window" for n in node.walk())
        ):
            raise UnsupportedSQLError(
                at(node, f"window bounds in {clause.upper()} are not supported", "filter the event-time column")
            )
    return call, window


def _window_of(call: exp.Anonymous, at: Callable[[exp.Expression, str, str], str]) -> EventWindow:
    args = list(call.expressions)
    if not 2 <= len(args) <= 3:
        raise UnsupportedSQLError(
            at(call, f"{_spark(call)}: window takes (time_column, size[, slide]) here (no start offset)", NEAREST)
        )
    time, *lengths = args
    if not isinstance(time, exp.Column):
        raise UnsupportedSQLError(
            at(call, f"{_spark(call)}: the event time must be a column of the source", "window(ts, '10 minutes')")
        )
    values = []
    for arg in lengths:
        if not (isinstance(arg, exp.Literal) and arg.is_string):
            raise UnsupportedSQLError(
                at(call, f"{_spark(call)}: window lengths must be string literals", "window(ts, '10 minutes')")
            )
        try:
            values.append(parse_interval(arg.this))
        except ValueError as exc:
            raise UnsupportedSQLError(at(call, f"{_spark(call)}: {exc}", "window(ts, '10 minutes')")) from None
    size = values[0]
    slide = values[1] if len(values) > 1 else size
    if size <= 0 or slide <= 0 or slide > size:
        raise UnsupportedSQLError(
            at(
                call,
                f"{_spark(call)}: the slide must be positive and at most the window size",
                "window(ts, '10 minutes', '5 minutes')",
            )
        )
    return EventWindow(
        time_column=time.sql("spark"),
        size=lengths[0].this,
        slide=lengths[1].this if len(lengths) > 1 else None,
        size_us=size,
        slide_us=slide,
    )


def _spark(node: exp.Expression) -> str:
    return re.sub(FUNCTION, "window", node.sql("spark"), flags=re.IGNORECASE)
