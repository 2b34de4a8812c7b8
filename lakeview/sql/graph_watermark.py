"""A watermark on a view kept as an operator graph (joins, unions, CTEs, subqueries).

The rule is the one-source stack's (:mod:`lakeview.sql.watermark`), applied to ONE source of the view:
the event-time column's. A row of that source is late when its event time is older than the greatest
event time of that source's on-time rows in the committed epochs before it, minus the delay; a late
row is quarantined (its reason names the watermark), counted (``lakeview.rows-late``) and left out
of every input of the graph. The view is the recompute of its SQL over its inputs without the late
rows (``lakeview verify`` replays the rule batch by batch). Every row of that source with an event
time moves the watermark (not only those passing the view's WHERE or finding a join partner: those
depend on other inputs). A change feed ([changes]) is judged image by image, as the one-source rule does: its
epoch's Z-set (old images -1, new +1) loses its late images (the mirror still takes every change), and only its
new on-time images move the watermark. A before/after-image feed ([images]) is judged the same way on its batch's
Z-set (before -1, after +1), consolidated first so that an image a later change of the batch cancels is never
judged.

Not guaranteed: a closed window's row can still change when another input changes (a dimension row
updated or deleted re-groups the fact rows it joins), so only the state that source alone reaches is
bounded (dropped once its windows close, :mod:`lakeview.graph.expire`): not a join's sides nor what a join
feeds.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from lakeview.config.models import ProjectConfig
from lakeview.config.schema import parse_ddl
from lakeview.errors import UnsupportedSQLError
from lakeview.sql.plan import parse_statement
from lakeview.sql.watermark import delay_us
from lakeview.sql.windows import FUNCTION


@dataclass(frozen=True)
class EventTime:
    """Which source's column the watermark of a graph view reads."""

    source: str
    column: str  # as the source's schema spells it


def event_time(config: ProjectConfig, view: str, sources: tuple[str, ...]) -> EventTime:
    """The event-time column of a graph view with a watermark: ``event_time`` as declared (``"ts"``,
    ``"orders.ts"`` or ``"o.ts"``, ``o`` an alias of orders), else the column ``window()`` groups by. Raises ValueError naming the problem
    (no such column, one of several sources', a change feed's, another view's)."""
    spec = config.views[view]
    declared = spec.event_time or _window_column(spec.sql, spec.dialect)
    if declared is None:
        raise ValueError(
            'a watermark needs an event-time column: GROUP BY window(ts, ...) or event_time = "source.column"'
        )
    qualifier, _, name = declared.rpartition(".")
    qualifier, name = qualifier.strip('`"'), name.strip('`"')
    qualifier = _aliases(spec.sql, spec.dialect).get(qualifier.lower(), qualifier)  # o.ts: o aliases orders
    readable = {s: _columns(config, s) for s in sources}
    candidates = [s for s in sources if s.lower() == qualifier.lower()] if qualifier else list(sources)
    if qualifier and not candidates:
        raise ValueError(f"event_time {declared!r}: {qualifier!r} is not a source of the view ({', '.join(sources)})")
    having = [s for s in candidates if name.lower() in readable[s]]
    if not having:
        raise ValueError(f"event_time {declared!r} is a column of no source of the view ({', '.join(candidates)})")
    if len(having) > 1:
        raise ValueError(
            f"event_time {declared!r} is a column of more than one source ({', '.join(having)}); "
            f'name the one whose rows can be late, e.g. event_time = "{having[0]}.{name}"'
        )
    source = having[0]
    if source not in config.sources:
        raise ValueError(f"a watermark applies to a view's source, not to the view {source!r} it reads")
    column, kind = readable[source][name.lower()]
    if "TIMESTAMP" not in kind.upper():
        raise ValueError(f"event_time {source}.{column} is {kind}, not a TIMESTAMP")
    return EventTime(source, column)


def check_graph(config: ProjectConfig, view: str, sources: tuple[str, ...]) -> str | None:
    """What is wrong with a graph view's ``watermark`` / ``event_time`` settings, or None."""
    spec = config.views[view]
    if spec.watermark is None:
        return 'event_time is set without a watermark; add watermark = "10 minutes"' if spec.event_time else None
    try:
        delay_us(spec.watermark)
        event_time(config, view, sources)
    except (ValueError, UnsupportedSQLError) as exc:
        return str(exc)
    return None


def _columns(config: ProjectConfig, source: str) -> dict[str, tuple[str, str]]:
    """A declared source's columns by lowercase name: (name, Spark type); {} for another view."""
    if source not in config.sources:
        return {}
    return {c.name.lower(): (c.name, c.type_sql("spark")) for c in parse_ddl(config.sources[source].schema_)}


def _window_column(sql: str, dialect: str) -> str | None:
    """``window()``'s time column as ``table.column`` (the table its qualifier aliases) or ``column``."""
    tree = parse_statement(sql, dialect)
    call = next((c for c in tree.find_all(exp.Anonymous) if c.name.lower() == FUNCTION), None)
    if call is None or not call.expressions or not isinstance(call.expressions[0], exp.Column):
        return None
    column = call.expressions[0]
    if not column.table:
        return column.name
    table = _aliases(sql, dialect).get(column.table.lower())
    return f"{table}.{column.name}" if table else column.name


def _aliases(sql: str, dialect: str) -> dict[str, str]:
    """The tables the view's SQL reads, by their alias (lowercase)."""
    return {t.alias_or_name.lower(): t.name for t in parse_statement(sql, dialect).find_all(exp.Table)}
