"""AWS Glue Data Catalog registrar (boto3).

One Glue database per namespace; each view is an ``EXTERNAL_TABLE``. Iceberg views carry
``table_type=ICEBERG`` and ``metadata_location``/``previous_metadata_location`` (what pyiceberg's
GlueCatalog, Trino, Spark and Athena read); Delta views carry ``spark.sql.sources.provider=delta``
and ``table_type=DELTA`` with the table location. Pointer moves use Glue's optimistic lock: the
``VersionId`` read is passed to ``UpdateTable``; when Glue answers ConcurrentModificationException
the entry is re-read and the move re-decided, never written blindly.
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
    OWNER,
    PREVIOUS_METADATA_LOCATION,
    TABLE_TYPE,
    PublishedTable,
    Registrar,
    Registration,
    check_not_ahead,
    hive_columns,
)
from lakeview.errors import RegistrarConflictError, RegistrarError
from lakeview.retrying import retry_transient

log = logging.getLogger("lakeview.registrars.glue")
MAX_ATTEMPTS = 5


class GlueRegistrar(Registrar):
    name = "glue"

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        region: str = "us-east-1",
        catalog_id: str | None = None,
        client: Any = None,
    ) -> None:
        if client is None:
            import boto3
            from botocore.config import Config

            client = boto3.client(
                "glue",
                endpoint_url=endpoint,
                region_name=region,
                # Fail fast: the registration loop owns retries and backoff.
                config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=3, read_timeout=15),
            )
        self.glue = client
        self._catalog = {"CatalogId": catalog_id} if catalog_id else {}
        self._databases: set[str] = set()  # known to exist: skip the create call on every publish

    # -- Registrar -------------------------------------------------------------------------
    def register(self, table: PublishedTable) -> None:
        try:
            self._register(table)
        except Exception:
            self._databases.clear()  # maybe dropped behind our back: create it again next time
            raise

    def _register(self, table: PublishedTable) -> None:
        with _mapped(table.qualified_name):
            self._ensure_database(table.namespace)
            attempts = iter(range(1, MAX_ATTEMPTS + 1))

            def attempt() -> None:
                number = next(attempts)
                current = self._get(table.namespace, table.name)
                if current is None:
                    try:
                        self.glue.create_table(DatabaseName=table.namespace, TableInput=_table_input(table, None), **self._catalog)
                        return
                    except self.glue.exceptions.AlreadyExistsException as exc:  # created concurrently: re-read and decide again
                        raise RegistrarError(f"glue: {table.qualified_name}: created concurrently ({number} attempts)") from exc
                if not self._needs_move(table, current):
                    return
                try:
                    self.glue.update_table(
                        DatabaseName=table.namespace,
                        TableInput=_table_input(table, current),
                        VersionId=current["VersionId"],
                        SkipArchive=True,
                        **self._catalog,
                    )
                except self.glue.exceptions.ConcurrentModificationException as exc:
                    log.info("glue: %s changed under us (attempt %s): %s; re-reading", table.qualified_name, number, exc)
                    raise RegistrarError(f"glue: {table.qualified_name}: lost {number} concurrent updates in a row") from exc

            retry_transient(attempt, what=f"glue: register {table.qualified_name}", attempts=MAX_ATTEMPTS, first_s=0.05, max_s=1.0)

    def unregister(self, namespace: str, name: str) -> bool:
        with _mapped(f"{namespace}.{name}"):
            try:
                self.glue.delete_table(DatabaseName=namespace, Name=name, **self._catalog)
                return True
            except self.glue.exceptions.EntityNotFoundException:
                return False

    def registered(self, namespace: str, name: str) -> Registration | None:
        with _mapped(f"{namespace}.{name}"):
            current = self._get(namespace, name)
        if current is None:
            return None
        params = current.get("Parameters", {})
        kind = params.get(TABLE_TYPE, "").lower() or None
        return Registration(
            format=kind,
            location=current.get("StorageDescriptor", {}).get("Location"),
            metadata_location=params.get(METADATA_LOCATION),
            previous_metadata_location=params.get(PREVIOUS_METADATA_LOCATION),
            parameters=dict(params),
        )

    # -- helpers ---------------------------------------------------------------------------
    def _ensure_database(self, namespace: str) -> None:
        if namespace in self._databases:
            return
        try:
            self.glue.create_database(DatabaseInput={"Name": namespace, "Description": "Lakeview views"}, **self._catalog)
        except self.glue.exceptions.AlreadyExistsException:
            pass
        self._databases.add(namespace)

    def _get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.glue.get_table(DatabaseName=namespace, Name=name, **self._catalog)["Table"]
        except self.glue.exceptions.EntityNotFoundException:
            return None

    def _needs_move(self, table: PublishedTable, current: dict[str, Any]) -> bool:
        params = current.get("Parameters", {})
        where = f"glue {table.qualified_name}"
        if params.get(OWNER) != table.qualified_name:
            raise RegistrarConflictError(f"{where}: an entry not created by Lakeview exists; drop it or rename the view")
        if table.format == ICEBERG:
            check_not_ahead(table, params.get(METADATA_LOCATION), where)
            same = params.get(METADATA_LOCATION) == table.metadata_location
        else:
            same = params.get(TABLE_TYPE) == "DELTA" and current.get("StorageDescriptor", {}).get("Location") == table.location
        columns = [(c["Name"], c["Type"]) for c in current.get("StorageDescriptor", {}).get("Columns", [])]
        return not (same and columns == hive_columns(table.schema))


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


@contextlib.contextmanager
def _mapped(what: str) -> Iterator[None]:
    """boto3/botocore failures → RegistrarError (transient); conflicts pass through."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except RegistrarConflictError:
        raise
    except (BotoCoreError, ClientError) as exc:
        raise RegistrarError(f"glue: {what}: {exc}") from exc
