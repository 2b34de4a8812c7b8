"""Inline views (``materialize = false``): not maintained, published as Iceberg *views*.

An inline view's SQL reads the project's materialized views. It is published in the REST catalog
as an Iceberg view whose SQL representations (one per dialect: spark, trino, duckdb) are
generated with sqlglot from the Spark SQL in the config, with every view it reads qualified as
``<namespace>.<view>`` so a reader resolves it in the same catalog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from lakeview.errors import ConfigError, LakeviewError

if TYPE_CHECKING:
    import pyarrow as pa

    from catalog_api.store import CatalogStore
    from lakeview.config import ProjectConfig

DIALECTS = ("spark", "trino", "duckdb")
SQL_PROPERTY = "lakeview.sql.{dialect}"  # materialized views carry their SQL per dialect here


def _parse(config: ProjectConfig, name: str) -> exp.Expression:
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
    query = _parse(config, name)
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
                config.file, f"views.{name}.sql", f"reads {view!r}, a Delta view; an inline view can read Iceberg views only"
            )


def representations(config: ProjectConfig, name: str) -> dict[str, str]:
    """The inline view's SQL per dialect, each view it reads qualified as ``namespace.view``."""
    query = _parse(config, name)
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
def inline_views(config: ProjectConfig) -> list[str]:
    return [name for name, view in config.views.items() if not view.materialize]


def view_schema(config: ProjectConfig, name: str, store: CatalogStore) -> pa.Schema:
    """The inline view's columns: its DuckDB representation run with LIMIT 0 over empty tables
    shaped like the materialized views it reads (their current Iceberg schemas)."""
    import duckdb

    con = duckdb.connect()
    for view in referenced_views(config, name):
        namespace = config.views[view].namespace
        con.register("empty", store.load_table((namespace, view)).schema().as_arrow().empty_table())
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{namespace}"')
        con.execute(f'CREATE TABLE "{namespace}"."{view}" AS SELECT * FROM empty')
        con.unregister("empty")
    return con.sql(f"SELECT * FROM ({representations(config, name)['duckdb']}) LIMIT 0").arrow().schema


def publish_inline_view(config: ProjectConfig, name: str, store: CatalogStore | None = None) -> str:
    """Create or replace the inline view ``name`` as an Iceberg view in the catalog store.

    Returns "created", "replaced" or "unchanged". Raises NoSuchTableError while a view it reads
    has no table yet.
    """
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids
    from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

    from catalog_api.views import AddSchema, AddViewVersion, AssertViewUUID, SetCurrentViewVersion, ViewCatalog
    from lakeview.errors import AlreadyExistsError, NoSuchViewError

    if store is None:
        from lakeview.embedded import open_store

        store = open_store(config)
    view = config.views[name]
    identifier = (view.namespace, name)
    schema = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(view_schema(config, name, store)))
    version = ViewVersion(
        version_id=1,
        schema_id=schema.schema_id,
        summary={"engine-name": "lakeview", "lakeview.view": name},
        representations=[
            ViewRepresentation(SQLViewRepresentation(type="sql", sql=sql, dialect=dialect))
            for dialect, sql in representations(config, name).items()
        ],
        default_namespace=[view.namespace],
    )
    views = ViewCatalog(store)
    try:
        store.create_namespace((view.namespace,), {})
    except AlreadyExistsError:
        pass
    try:
        _, current = views.load_view(identifier)
    except NoSuchViewError:
        try:
            views.create_view(identifier, schema, version, None, {"lakeview.inline": "true"})
            return "created"
        except AlreadyExistsError:
            _, current = views.load_view(identifier)  # created concurrently: replace it below
    active = next(v for v in current.versions if v.version_id == current.current_version_id)
    active_schema = next(s for s in current.schemas if s.schema_id == active.schema_id)
    if active.representations == version.representations and active_schema.fields == schema.fields:
        return "unchanged"
    views.commit_view(
        identifier,
        [AssertViewUUID(type="assert-view-uuid", uuid=current.view_uuid)],
        [
            AddSchema(action="add-schema", schema=schema, **{"last-column-id": schema.highest_field_id}),
            AddViewVersion(action="add-view-version", **{"view-version": version.model_copy(update={"schema_id": -1})}),
            SetCurrentViewVersion(action="set-current-view-version", **{"view-version-id": -1}),
        ],
    )
    return "replaced"


def publish_inline_views(config: ProjectConfig, store: CatalogStore | None = None) -> dict[str, str]:
    """Publish every inline view of the project; ``{view: outcome or error}``. Never raises for
    one view failing (a view it reads may have no table yet): the outcome says why."""
    outcomes: dict[str, str] = {}
    for name in inline_views(config):
        try:
            outcomes[name] = publish_inline_view(config, name, store)
        except LakeviewError as exc:
            outcomes[name] = f"not published: {exc}"
    return outcomes
