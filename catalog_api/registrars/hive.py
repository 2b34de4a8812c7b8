"""Hive Metastore registrar (Thrift, through pyiceberg's ``_HiveClient`` and the ``hive_metastore``
stubs it ships with).

One HMS database per namespace; each view is an ``EXTERNAL_TABLE`` with ``EXTERNAL=TRUE``.
Iceberg views follow the Iceberg HMS conventions (``table_type=ICEBERG``, ``metadata_location``,
``previous_metadata_location``, pyiceberg's storage descriptor) so pyiceberg's HiveCatalog,
Spark's ``type=hive`` Iceberg catalog and Trino's ``hive_metastore`` catalog load them; Delta
views carry ``spark.sql.sources.provider=delta``, ``table_type=DELTA`` and the location.

HMS 2.3 has no compare-and-swap on ``alter_table`` (Iceberg's own HiveCatalog takes an HMS lock,
which needs the metastore's transaction tables). So the registrar declares no optimistic locking,
and the shared register loop re-reads the entry right before altering it and again after, refuses
to move a pointer backwards or over a foreign entry, and retries when the re-read shows someone
else moved it meanwhile.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from pyiceberg.catalog.hive import _HiveClient

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
    capabilities = RegistrarCapabilities(optimistic_locking=False)  # alter_table has no compare-and-swap in HMS 2.3

    def __init__(self, uri: str) -> None:
        super().__init__()
        self.uri = uri
        self._local = threading.local()  # the Thrift client of the session this thread is in

    # -- what the shared loop needs from HMS -------------------------------------------------------
    @contextlib.contextmanager
    def session(self, what: str) -> Iterator[None]:
        """One Thrift connection for the session; Thrift and socket failures → RegistrarError."""
        from thrift.Thrift import TException  # lazy: thrift loads only for Hive Metastore

        try:
            with _HiveClient(self.uri) as client:
                self._local.client = client
                try:
                    yield
                finally:
                    self._local.client = None
        except RegistrarConflictError:
            raise
        except (TException, OSError) as exc:
            raise RegistrarError(f"hive {self.uri}: {what}: {exc.__class__.__name__}: {exc}") from exc

    @property
    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            raise RuntimeError("HiveRegistrar: Thrift calls outside a session")
        return client

    def create_namespace(self, namespace: str) -> None:
        from hive_metastore.ttypes import (  # lazy: the HMS client loads only for Hive Metastore
            AlreadyExistsException,
            Database,
        )

        try:
            self._client.create_database(Database(name=namespace, description="Lakeview views", parameters={}))
        except AlreadyExistsException:
            pass

    def get(self, namespace: str, name: str) -> Registration | None:
        from hive_metastore.ttypes import NoSuchObjectException  # lazy: the HMS client loads only for Hive Metastore

        try:
            current = self._client.get_table(namespace, name)
        except NoSuchObjectException:
            return None
        params = dict(current.parameters or {})
        return Registration(
            format=(params.get(TABLE_TYPE) or "").lower() or None,
            location=current.sd.location if current.sd else None,
            metadata_location=params.get(METADATA_LOCATION),
            previous_metadata_location=params.get(PREVIOUS_METADATA_LOCATION),
            parameters=params,
            columns=tuple((c.name, c.type) for c in (current.sd.cols if current.sd else [])),
            entry=current,
        )

    def create(self, table: PublishedTable) -> bool:
        from hive_metastore.ttypes import AlreadyExistsException  # lazy: the HMS client loads only for Hive Metastore

        try:
            self._client.create_table(_hive_table(table, None))
            return True
        except AlreadyExistsException:
            return False

    def swap(self, table: PublishedTable, current: Registration) -> bool:
        # No compare-and-swap: the shared loop re-reads the entry after this write.
        self._client.alter_table(table.namespace, table.name, _hive_table(table, current.entry))
        return True

    def delete(self, namespace: str, name: str) -> bool:
        from hive_metastore.ttypes import NoSuchObjectException  # lazy: the HMS client loads only for Hive Metastore

        try:
            self._client.drop_table(namespace, name, False)  # deleteData=False: never the view's files
            return True
        except NoSuchObjectException:
            return False


def _hive_table(table: PublishedTable, current: Any | None) -> Any:
    from hive_metastore.ttypes import (  # lazy: the HMS client loads only for Hive Metastore
        FieldSchema,
        SerDeInfo,
        StorageDescriptor,
    )
    from hive_metastore.ttypes import Table as HiveTable  # lazy: the HMS client loads only for Hive Metastore

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
