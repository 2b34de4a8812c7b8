"""Which tables a view's ``*`` selects every column of: a ``SELECT *`` or ``SELECT t.*`` names its columns only
when it runs, so such a view's columns follow its inputs' (a source's ``new_columns = "evolve"``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from lakeview.config.models import NewColumns
from lakeview.sql.plan import parse_statement

if TYPE_CHECKING:
    from lakeview.config.models import ProjectConfig
    from lakeview.sql.graph_plan import GraphPlan


def starred_tables(tree: exp.Expression) -> set[str]:
    """The names of the tables some ``SELECT`` in ``tree`` reads with ``*`` (every table in its FROM and JOINs)
    or ``alias.*`` (that table). A subquery's or CTE's own ``SELECT`` is looked at where it is written: a ``*``
    over a subquery or CTE selects the columns that one names. ``COUNT(*)`` selects no column."""
    found: set[str] = set()
    for select in tree.find_all(exp.Select):
        from_ = select.args.get("from_") or select.args.get("from")
        nodes = [from_.this] if from_ is not None else []
        nodes += [join.this for join in select.args.get("joins") or []]
        tables = {node.alias_or_name.lower(): node.name for node in nodes if isinstance(node, exp.Table)}
        for item in select.expressions:
            if isinstance(item, exp.Star):
                found.update(tables.values())
            elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star) and item.table.lower() in tables:
                found.add(tables[item.table.lower()])
    return found


def evolving_stars(config: ProjectConfig, plan: GraphPlan) -> list[str]:
    """The sources with ``new_columns = "evolve"`` a graph view's ``*`` selects (:func:`starred_tables`): the view
    reads them as they evolve (its pipeline and ``lakeview verify``'s recompute alike); it reads every other
    source's declared columns."""
    starred = starred_tables(parse_statement(plan.sql, plan.dialect))
    sources = config.sources
    return sorted(t for t in starred if t in sources and sources[t].new_columns is NewColumns.EVOLVE)
