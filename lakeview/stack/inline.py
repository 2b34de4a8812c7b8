"""Inline views (``materialize = false``) published as Iceberg views in the catalog, with the
view's SQL in every reader's dialect (see :mod:`lakeview.sql.dialects`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb
from pyiceberg.catalog import Catalog
from pyiceberg.schema import assign_fresh_schema_ids
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

from catalog_api.store.catalog import CatalogStore, open_store
from catalog_api.store.views import AddSchema, AddViewVersion, AssertViewUUID, SetCurrentViewVersion, ViewCatalog
from lakeview.errors import AlreadyExistsError, LakeviewError, NoSuchViewError
from lakeview.sql.dialects import referenced_views, representations

if TYPE_CHECKING:
    import pyarrow as pa

    from lakeview.config.models import ProjectConfig


def inline_views(config: ProjectConfig) -> list[str]:
    return [name for name, view in config.views.items() if not view.materialize]


def view_schema(config: ProjectConfig, name: str, store: CatalogStore) -> pa.Schema:
    """The inline view's columns: its DuckDB representation run with LIMIT 0 over empty tables
    shaped like the materialized views it reads (their current Iceberg schemas)."""

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

    if store is None:
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
