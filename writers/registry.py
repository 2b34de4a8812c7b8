"""The writers by table format: which writer a view's table gets, from the project config.

One loader per table format in an explicit dict; heavy imports happen only for the formats a
project uses.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pyiceberg.catalog.rest import RestCatalog

from lakeview.config.models import ProjectConfig, TableFormat, delta_storage_options, file_io_properties
from lakeview.errors import ConfigError
from writers.base import SnapshotWriter
from writers.iceberg.writer import IcebergWriter
from writers.maintenance import MaintenancePolicy


def policy_for(project: ProjectConfig, view: str) -> MaintenancePolicy:
    """The view's retention and thresholds as the writers' maintenance policy."""
    config = project.views[view]
    retention, thresholds = config.retention, config.maintenance
    return MaintenancePolicy(
        keep_snapshots=retention.keep_snapshots,
        max_age_ms=None if retention.max_age is None else int((retention.max_age.seconds or 0) * 1000),
        small_file_bytes=thresholds.small_file_bytes,
        compact_min_files=thresholds.compact_min_files,
        delete_files_max=thresholds.delete_files_max,
        orphan_min_age_ms=int((thresholds.orphan_min_age.seconds or 0) * 1000),
    )


def _iceberg_writer(project: ProjectConfig, view: str, catalog_uri: str) -> SnapshotWriter:
    catalog = rest_catalog(project, f"lakeview-{view}", catalog_uri)
    return IcebergWriter(catalog, project.views[view].namespace, view, compaction=policy_for(project, view))


def rest_catalog(project: ProjectConfig, name: str, catalog_uri: str) -> Any:
    """A pyiceberg RestCatalog client committing through ``catalog_uri`` (warehouse FileIO, OAuth2)."""

    return RestCatalog(
        name,
        uri=catalog_uri,
        warehouse=project.lake.name,
        **file_io_properties(project),
        **catalog_client_properties(catalog_uri),
    )


def catalog_client_properties(catalog_uri: str) -> dict[str, str]:
    """OAuth2 client credentials for committing through a catalog with auth: ``CLIENT:SECRET``
    from ``LAKEVIEW_CATALOG_CREDENTIAL`` (an [auth.clients.CLIENT] with write on the views'
    namespaces). From the environment, so the secret never sits in lakeview.toml."""
    credential = os.environ.get("LAKEVIEW_CATALOG_CREDENTIAL")
    if not credential:
        return {}
    return {"credential": credential, "oauth2-server-uri": f"{catalog_uri.rstrip('/')}/v1/oauth/tokens"}


def _delta_writer(project: ProjectConfig, view: str, catalog_uri: str) -> SnapshotWriter:
    from writers.delta.writer import DeltaWriter  # lazy: deltalake loads only for Delta tables

    return DeltaWriter(project.table_location(view), view, delta_storage_options(project))


def state_writer_factory(project: ProjectConfig, view: str) -> Callable[[str], SnapshotWriter] | None:
    """Where a view's state tables go: next to a Delta view as Delta tables; None for Iceberg
    (the pipeline keeps them in the view's catalog)."""
    if project.views[view].format is not TableFormat.DELTA:
        return None
    from writers.delta.writer import DeltaWriter  # lazy: deltalake loads only for Delta tables

    base = project.table_location(view).rsplit("/", 1)[0]
    return lambda name: DeltaWriter(f"{base}/{name}", name, delta_storage_options(project))


# One loader per table format; heavy imports happen only for the formats a project uses.
WRITERS: dict[TableFormat, Callable[[ProjectConfig, str, str], SnapshotWriter]] = {
    TableFormat.ICEBERG: _iceberg_writer,
    TableFormat.DELTA: _delta_writer,
}


def make_writer(project: ProjectConfig, view: str, catalog_uri: str) -> SnapshotWriter:
    """The writer for a view's table format (Iceberg commits through the catalog at ``catalog_uri``)."""
    config = project.views[view]
    loader = WRITERS.get(config.format)
    if loader is None:
        valid = ", ".join(f.value for f in WRITERS)
        raise ConfigError(
            project.file, f"views.{view}.format", f"{config.format.value!r} has no writer; use one of {valid}"
        )
    return loader(project, view, catalog_uri)
