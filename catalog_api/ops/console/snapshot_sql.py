"""The SQL that reads one snapshot of a view, per engine, as the console shows it to copy.

Iceberg views are read through the REST catalog the browser reached (DuckDB ``ATTACH``, a
Spark ``type=rest`` catalog, Trino's ``lakeview`` catalog from ``lakeview trino-config``);
Delta views by their table path (DuckDB ``delta_scan``, Spark's path table) and through the
Delta Lake catalog Trino reaches them by (``lakeview_glue_delta`` / ``lakeview_hive_delta``).
"""

from __future__ import annotations

from dataclasses import dataclass

from lakeview.sql.duck import attach_sql

CLIENT_ID, CLIENT_SECRET = "<client_id>", "<client_secret>"  # placeholders the reader fills in


@dataclass(frozen=True)
class TableRef:
    """Where a view's table is, as the SQL needs it."""

    namespace: str
    view: str
    format: str  # "iceberg" or "delta"
    catalog_uri: str  # e.g. http://127.0.0.1:8181/iceberg, as the caller reached the catalog
    warehouse: str  # the REST catalog's warehouse name (its prefix)
    location: str  # a Delta table's path
    auth: bool = False
    delta_catalog: str = "lakeview_hive_delta"  # Trino's Delta Lake catalog (lakeview.cli.trino)


def snapshot_sql(ref: TableRef, snapshot_id: int) -> dict[str, str]:
    """``{"duckdb", "spark", "trino"}``: a statement (DuckDB: a script) reading ``snapshot_id``
    (an Iceberg snapshot id, or a Delta version) of the view."""
    if ref.format == "delta":
        return {
            "duckdb": f"SELECT * FROM delta_scan('{ref.location}') -- version {snapshot_id}: "
            f"use Spark or Trino for an older version",
            "spark": f"SELECT * FROM delta.`{ref.location}` VERSION AS OF {snapshot_id}",
            "trino": f"SELECT * FROM {ref.delta_catalog}.{ref.namespace}.{ref.view} FOR VERSION AS OF {snapshot_id}",
        }
    attach = attach_sql(ref.catalog_uri, ref.warehouse)
    if ref.auth:  # DuckDB gets its own token with the reader's OAuth2 client credentials
        attach = (
            f"ATTACH '{ref.warehouse}' AS lake (TYPE iceberg, ENDPOINT '{ref.catalog_uri}', "
            f"CLIENT_ID '{CLIENT_ID}', CLIENT_SECRET '{CLIENT_SECRET}', "
            f"OAUTH2_SERVER_URI '{ref.catalog_uri}/v1/oauth/tokens')"
        )
    table = f"{ref.namespace}.{ref.view}"
    return {
        "duckdb": f"{attach};\nSELECT * FROM lake.{table} AT (VERSION => {snapshot_id});",
        "spark": f"SELECT * FROM {ref.warehouse}.{table} VERSION AS OF {snapshot_id}",
        "trino": f"SELECT * FROM lakeview.{table} FOR VERSION AS OF {snapshot_id}",
    }
