"""AWS Glue Data Catalog registrar (boto3).

One Glue database per namespace; each view is an ``EXTERNAL_TABLE``. Iceberg views carry
``table_type=ICEBERG`` and ``metadata_location``/``previous_metadata_location`` (what pyiceberg's
GlueCatalog, Trino, Spark and Athena read); Delta views carry ``spark.sql.sources.provider=delta``
and ``table_type=DELTA`` with the table location. Pointer moves use Glue's optimistic lock: the
``VersionId`` read is passed to ``UpdateTable``; when Glue answers ConcurrentModificationException
the entry is re-read and the move re-decided, never written blindly (the loop is the shared one
of :class:`~catalog_api.registrars.base.Registrar`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from catalog_api.registrars.base import (
    DELTA,
    EXTERNAL_TABLE,
    ICEBERG,
    METADATA_LOCATION,
    PREVIOUS_METADATA_LOCATION,
    TABLE_TYPE,
    PublishedTable,
    Registrar,
    RegistrarCapabilities,
    Registration,
    hive_columns,
)
from lakeview.errors import RegistrarConflictError, RegistrarError

log = logging.getLogger("lakeview.registrars.glue")


class GlueRegistrar(Registrar):
    name = "glue"
    capabilities = RegistrarCapabilities(optimistic_locking=True)  # UpdateTable's VersionId

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        region: str = "us-east-1",
        catalog_id: str | None = None,
        client: Any = None,
    ) -> None:
        super().__init__()
        if client is None:
            import boto3  # lazy: boto3 loads only for Glue or S3
            from botocore.config import Config  # lazy: botocore loads only for Glue or S3

            client = boto3.client(
                "glue",
                endpoint_url=endpoint,
                region_name=region,
                # Fail fast: the registration loop owns retries and backoff.
                config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=3, read_timeout=15),
            )
        self.glue = client
        self._catalog = {"CatalogId": catalog_id} if catalog_id else {}

    # -- what the shared loop needs from Glue ------------------------------------------------------
    @contextlib.contextmanager
    def session(self, what: str) -> Iterator[None]:
        """boto3/botocore failures → RegistrarError (transient); conflicts pass through."""
        from botocore.exceptions import BotoCoreError, ClientError  # lazy: botocore loads only for Glue or S3

        try:
            yield
        except RegistrarConflictError:
            raise
        except (BotoCoreError, ClientError) as exc:
            raise RegistrarError(f"glue: {what}: {exc}") from exc

    def create_namespace(self, namespace: str) -> None:
        try:
            database = {"Name": namespace, "Description": "Lakeview views"}
            self.glue.create_database(DatabaseInput=database, **self._catalog)
        except self.glue.exceptions.AlreadyExistsException:
            pass

    def get(self, namespace: str, name: str) -> Registration | None:
        try:
            current = self.glue.get_table(DatabaseName=namespace, Name=name, **self._catalog)["Table"]
        except self.glue.exceptions.EntityNotFoundException:
            return None
        params = current.get("Parameters", {})
        descriptor = current.get("StorageDescriptor", {})
        return Registration(
            format=params.get(TABLE_TYPE, "").lower() or None,
            location=descriptor.get("Location"),
            metadata_location=params.get(METADATA_LOCATION),
            previous_metadata_location=params.get(PREVIOUS_METADATA_LOCATION),
            parameters=dict(params),
            columns=tuple((c["Name"], c["Type"]) for c in descriptor.get("Columns", [])),
            entry=current,
        )

    def create(self, table: PublishedTable) -> bool:
        try:
            self.glue.create_table(DatabaseName=table.namespace, TableInput=_table_input(table, None), **self._catalog)
            return True
        except self.glue.exceptions.AlreadyExistsException:
            return False

    def swap(self, table: PublishedTable, current: Registration) -> bool:
        try:
            self.glue.update_table(
                DatabaseName=table.namespace,
                TableInput=_table_input(table, current.entry),
                VersionId=current.entry["VersionId"],
                SkipArchive=True,
                **self._catalog,
            )
            return True
        except self.glue.exceptions.ConcurrentModificationException as exc:
            log.info("glue: %s: stale VersionId: %s", table.qualified_name, exc)
            return False

    def delete(self, namespace: str, name: str) -> bool:
        try:
            self.glue.delete_table(DatabaseName=namespace, Name=name, **self._catalog)
            return True
        except self.glue.exceptions.EntityNotFoundException:
            return False


def _table_input(table: PublishedTable, current: dict[str, Any] | None) -> dict[str, Any]:
    """The Glue TableInput for ``table``; keeps parameters others added to ``current``."""
    params = dict(current.get("Parameters", {})) if current else {}
    params.update(table.parameters())
    if table.format == ICEBERG:
        old = (current or {}).get("Parameters", {}).get(METADATA_LOCATION)
        if old and old != table.metadata_location:
            params[PREVIOUS_METADATA_LOCATION] = old
    descriptor: dict[str, Any] = {
        "Columns": [{"Name": n, "Type": t} for n, t in hive_columns(table.schema)],
        "Location": table.location,
    }
    if table.format == DELTA:
        # Spark's Delta reader finds the table through the serde "path" parameter.
        descriptor["SerdeInfo"] = {"Parameters": {"path": table.location}}
    return {"Name": table.name, "TableType": EXTERNAL_TABLE, "Parameters": params, "StorageDescriptor": descriptor}
