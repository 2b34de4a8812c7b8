"""A view's SQL in every reader's dialect (spark, trino, duckdb; generated with sqlglot) and the
checks of inline views (``materialize = false``), whose SQL reads the project's materialized views,
each qualified as ``<namespace>.<view>`` so a reader resolves it in the same catalog (they are
published as Iceberg views by :mod:`lakeview.stack.inline`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from lakeview.errors import ConfigError

if TYPE_CHECKING:
    from lakeview.config.models import ProjectConfig

DIALECTS = ("spark", "trino", "duckdb")
SQL_PROPERTY = "lakeview.sql.{dialect}"  # materialized views carry their SQL per dialect here


def parse_view_sql(config: ProjectConfig, name: str) -> exp.Expression:
    view = config.views[name]
    try:
        statements = [s for s in sqlglot.parse(view.sql, read=view.dialect) if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise ConfigError(config.file, f"views.{name}.sql", f"cannot parse: {exc}") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise ConfigError(config.file, f"views.{name}.sql", "must be exactly one SELECT query")
    return statements[0]


def _cte_names(query: exp.Expression) -> set[str]:
    return {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}


def referenced_views(config: ProjectConfig, name: str) -> list[str]:
    """The materialized views an inline view reads. Raises ConfigError for anything else."""
    query = parse_view_sql(config, name)
    ctes = _cte_names(query)
    found: list[str] = []
    for table in query.find_all(exp.Table):
        if table.name.lower() in ctes and not table.db:
            continue
        target = config.views.get(table.name)
        materialized = sorted(v for v, c in config.views.items() if c.materialize)
        if target is None or not target.materialize or (table.db and table.db != target.namespace):
            raise ConfigError(
                config.file,
                f"views.{name}.sql",
                f"reads {table.sql(dialect='spark')!r}, which is not a materialized view of this project "
                f"(materialized views: {', '.join(materialized) or 'none'})",
            )
        if table.name not in found:
            found.append(table.name)
    if not found:
        raise ConfigError(config.file, f"views.{name}.sql", "an inline view must read at least one materialized view")
    return found


def check_inline_view(config: ProjectConfig, name: str) -> None:
    """Config-time check of an inline view (see :func:`referenced_views`): it reads materialized
    Iceberg views only (an Iceberg view over a Delta table would not resolve in Iceberg readers)."""
    for view in referenced_views(config, name):
        if config.views[view].format.value != "iceberg":
            raise ConfigError(
                config.file,
                f"views.{name}.sql",
                f"reads {view!r}, a Delta view; an inline view can read Iceberg views only",
            )


def representations(config: ProjectConfig, name: str) -> dict[str, str]:
    """The inline view's SQL per dialect, each view it reads qualified as ``namespace.view``."""
    query = parse_view_sql(config, name)
    ctes = _cte_names(query)

    def qualify(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and not (node.name.lower() in ctes and not node.db):
            target = config.views[node.name]
            qualified = exp.table_(node.name, db=target.namespace, quoted=False)
            if node.alias:
                qualified.set("alias", node.args["alias"])
            return qualified
        return node

    qualified = query.transform(qualify)
    return {dialect: qualified.sql(dialect=dialect) for dialect in DIALECTS}


def sql_properties(sql: str, read: str = "spark") -> dict[str, str]:
    """``lakeview.sql.<dialect>`` table properties for a materialized view's SQL (in ``read``)."""
    props = {}
    for dialect in DIALECTS:
        try:
            props[SQL_PROPERTY.format(dialect=dialect)] = sqlglot.transpile(sql, read=read, write=dialect)[0]
        except sqlglot.errors.SqlglotError:
            continue  # a dialect sqlglot cannot express is left out rather than written wrong
    return props


# -- publishing ----------------------------------------------------------------------------------
