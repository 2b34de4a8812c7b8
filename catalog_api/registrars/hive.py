"""Hive Metastore registrar (Thrift, through pyiceberg's ``_HiveClient`` and the ``hive_metastore``
stubs it ships with).

One HMS database per namespace; each view is an ``EXTERNAL_TABLE`` with ``EXTERNAL=TRUE``.
Iceberg views follow the Iceberg HMS conventions (``table_type=ICEBERG``, ``metadata_location``,
``previous_metadata_location``, pyiceberg's storage descriptor) so pyiceberg's HiveCatalog,
Spark's ``type=hive`` Iceberg catalog and Trino's ``hive_metastore`` catalog load them; Delta
views carry ``spark.sql.sources.provider=delta``, ``table_type=DELTA`` and the location.

HMS 2.3 has no compare-and-swap on ``alter_table`` (Iceberg's own HiveCatalog takes an HMS lock,
which needs the metastore's transaction tables). This registrar re-reads the entry right before
altering it and again after, refuses to move a pointer backwards or over a foreign entry, and
retries when the re-read shows someone else moved it meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import time
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

log = logging.getLogger("lakeview.registrars.hive")
MAX_ATTEMPTS = 5
# What pyiceberg's HiveCatalog writes for Iceberg tables (readers ignore it; Hive needs something).
ICEBERG_FORMATS = ("org.apache.hadoop.mapred.FileInputFormat", "org.apache.hadoop.mapred.FileOutputFormat")
LAZY_SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
# What Spark writes for data-source tables such as Delta.
DATASOURCE_FORMATS = (
    "org.apache.hadoop.mapred.SequenceFileInputFormat",
    "org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat",
)


class HiveRegistrar(Registrar):
    name = "hive"

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._databases: set[str] = set()  # known to exist: skip the create call on every publish

    @contextlib.contextmanager
    def _client(self, what: str) -> Iterator[Any]:
        from pyiceberg.catalog.hive import _HiveClient
        from thrift.Thrift import TException

        try:
            with _HiveClient(self.uri) as client:
                yield client
        except RegistrarConflictError:
            raise
        except (TException, OSError) as exc:
            raise RegistrarError(f"hive {self.uri}: {what}: {exc.__class__.__name__}: {exc}") from exc

    def register(self, table: PublishedTable) -> None:
        try:
            self._register(table)
        except Exception:
            self._databases.clear()  # maybe dropped behind our back: create it again next time
            raise

    def _register(self, table: PublishedTable) -> None:
        from hive_metastore.ttypes import AlreadyExistsException

        with self._client(table.qualified_name) as client:
            self._ensure_database(client, table.namespace)
            attempts = iter(range(1, MAX_ATTEMPTS + 1))

            def attempt() -> None:
                number = next(attempts)
                current = _get(client, table.namespace, table.name)
                if current is None:
                    try:
                        client.create_table(_hive_table(table, None))
                        return
                    except AlreadyExistsException as exc:  # created concurrently: re-read and decide again
                        raise RegistrarError(f"hive: {table.qualified_name}: created concurrently ({number} attempts)") from exc
                if not _needs_move(table, current):
                    return
                client.alter_table(table.namespace, table.name, _hive_table(table, current))
                after = _get(client, table.namespace, table.name)
                if after is not None and (after.parameters or {}).get(METADATA_LOCATION) == table.metadata_location:
                    return
                log.info("hive: %s moved by someone else while registering (attempt %s); re-reading", table.qualified_name, number)
                raise RegistrarError(f"hive: {table.qualified_name}: lost {number} concurrent updates in a row")

            retry_transient(attempt, what=f"hive: register {table.qualified_name}", attempts=MAX_ATTEMPTS, first_s=0.05, max_s=1.0)

    def unregister(self, namespace: str, name: str) -> bool:
        from hive_metastore.ttypes import NoSuchObjectException

        with self._client(f"{namespace}.{name}") as client:
            try:
                client.drop_table(namespace, name, False)  # deleteData=False: never the view's files
                return True
            except NoSuchObjectException:
                return False

    def registered(self, namespace: str, name: str) -> Registration | None:
        with self._client(f"{namespace}.{name}") as client:
            current = _get(client, namespace, name)
        if current is None:
            return None
        params = dict(current.parameters or {})
        return Registration(
            format=(params.get(TABLE_TYPE) or "").lower() or None,
            location=current.sd.location if current.sd else None,
            metadata_location=params.get(METADATA_LOCATION),
            previous_metadata_location=params.get(PREVIOUS_METADATA_LOCATION),
            parameters=params,
        )

    def _ensure_database(self, client: Any, namespace: str) -> None:
        from hive_metastore.ttypes import AlreadyExistsException, Database

        if namespace in self._databases:
            return
        try:
            client.create_database(Database(name=namespace, description="Lakeview views", parameters={}))
        except AlreadyExistsException:
            pass
        self._databases.add(namespace)


def _get(client: Any, namespace: str, name: str) -> Any | None:
    from hive_metastore.ttypes import NoSuchObjectException

    try:
        return client.get_table(namespace, name)
    except NoSuchObjectException:
        return None


def _needs_move(table: PublishedTable, current: Any) -> bool:
    params = current.parameters or {}
    where = f"hive {table.qualified_name}"
    if params.get(OWNER) != table.qualified_name:
        raise RegistrarConflictError(f"{where}: an entry not created by Lakeview exists; drop it or rename the view")
    if table.format == ICEBERG:
        check_not_ahead(table, params.get(METADATA_LOCATION), where)
        same = params.get(METADATA_LOCATION) == table.metadata_location
    else:
        same = params.get(TABLE_TYPE) == "DELTA" and current.sd is not None and _same_location(current.sd.location, table.location)
    columns = [(c.name, c.type) for c in (current.sd.cols if current.sd else [])]
    return not (same and columns == hive_columns(table.schema))


def _same_location(stored: str | None, ours: str) -> bool:
    """HMS normalizes ``/path`` to ``file:/path``."""
    def plain(location: str) -> str:
        return location.removeprefix("file://").removeprefix("file:")

    return stored is not None and plain(stored) == plain(ours)


def _hive_table(table: PublishedTable, current: Any | None) -> Any:
    from hive_metastore.ttypes import FieldSchema, SerDeInfo, StorageDescriptor
    from hive_metastore.ttypes import Table as HiveTable

    params = dict(current.parameters or {}) if current is not None else {}
    old = params.get(METADATA_LOCATION)
    params.update(table.parameters())
    if table.format == ICEBERG and old and old != table.metadata_location:
        params[PREVIOUS_METADATA_LOCATION] = old
    if table.format == DELTA:
        formats, serde = DATASOURCE_FORMATS, SerDeInfo(serializationLib=LAZY_SERDE, parameters={"path": table.location})
    else:
        formats, serde = ICEBERG_FORMATS, SerDeInfo(serializationLib=LAZY_SERDE, parameters={})
    now = int(time.time())
    return HiveTable(
        tableName=table.name,
        dbName=table.namespace,
        owner=(current.owner if current is not None else None) or "lakeview",
        createTime=current.createTime if current is not None else now,
        lastAccessTime=now,
        tableType=EXTERNAL_TABLE,
        parameters=params,
        partitionKeys=[],
        sd=StorageDescriptor(
            cols=[FieldSchema(name=n, type=t, comment=None) for n, t in hive_columns(table.schema)],
            location=table.location,
            inputFormat=formats[0],
            outputFormat=formats[1],
            serdeInfo=serde,
            compressed=False,
            numBuckets=-1,
            bucketCols=[],
            sortCols=[],
            parameters={},
        ),
    )
