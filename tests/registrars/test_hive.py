"""The Hive Metastore registrar against a real HMS 2.3.9 (the jars inside pyspark), read back with
pyiceberg's HiveCatalog and Spark's ``type=hive`` Iceberg catalog.

HMS 2.3 binds every interface, so it runs in a private network namespace (``unshare -n``) and is
reached through a loopback-only bridge (tests/registrars/hms.py). One boot per test run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog_api.registrars.hive import HiveRegistrar
from catalog_api.registrars.service import delta_location, published_table
from lakeview.errors import RegistrarConflictError, RegistrarError
from tests.registrars.conftest import commit, delta_table, free_port, iceberg_writer, sorted_rows
from tests.registrars.hms import BridgedMetastore


def hive_catalog(hms: BridgedMetastore):
    from pyiceberg.catalog.hive import HiveCatalog

    return HiveCatalog("hms", uri=hms.uri)


def test_iceberg_view_in_hms_read_by_pyiceberg_and_spark(hms, view_project, rest_catalog, unique_name, spark) -> None:
    project = view_project(register=["hive"], hive={"uri": hms.uri, "interval": "100ms"})
    namespace = project.views[unique_name].namespace
    writer = iceberg_writer(rest_catalog, project, unique_name)
    commit(writer, unique_name, 0, {1: (10, "a"), 2: (20, "b")})
    registrar = HiveRegistrar(hms.uri)
    first = published_table(project, unique_name)
    registrar.register(first)
    registrar.register(first)  # idempotent

    from pyiceberg.catalog.hive import _HiveClient

    with _HiveClient(hms.uri) as client:
        entry = client.get_table(namespace, unique_name)
    assert entry.tableType == "EXTERNAL_TABLE"
    assert entry.parameters["EXTERNAL"] == "TRUE"
    assert entry.parameters["table_type"] == "ICEBERG"
    assert entry.parameters["metadata_location"] == first.metadata_location
    assert [(c.name, c.type) for c in entry.sd.cols] == [
        ("product_id", "bigint"),
        ("total_sold", "bigint"),
        ("label", "string"),
    ]

    catalog = hive_catalog(hms)
    assert sorted_rows(catalog.load_table((namespace, unique_name)).scan().to_arrow()) == [(1, 10, "a"), (2, 20, "b")]

    commit(writer, unique_name, 1, {2: (25, "b"), 3: (30, "c")})
    second = published_table(project, unique_name)
    registrar.register(second)
    params = registrar.registered(namespace, unique_name).parameters  # type: ignore[union-attr]
    assert params["metadata_location"] == second.metadata_location
    assert params["previous_metadata_location"] == first.metadata_location
    expected = [(1, 10, "a"), (2, 25, "b"), (3, 30, "c")]
    assert sorted_rows(catalog.load_table((namespace, unique_name)).scan().to_arrow()) == expected
    with pytest.raises(RegistrarConflictError):
        registrar.register(first)  # never backwards

    # Spark's Iceberg catalog of type hive on the same thrift URI.
    spark.conf.set("spark.sql.catalog.lv_hms", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set("spark.sql.catalog.lv_hms.type", "hive")
    spark.conf.set("spark.sql.catalog.lv_hms.uri", hms.uri)
    spark.conf.set("spark.sql.catalog.lv_hms.cache-enabled", "false")
    rows = spark.sql(f"SELECT product_id, total_sold, label FROM lv_hms.{namespace}.{unique_name}").collect()
    assert sorted(tuple(r) for r in rows) == expected

    assert registrar.unregister(namespace, unique_name) is True
    assert registrar.registered(namespace, unique_name) is None
    assert Path(second.metadata_location.removeprefix("file://")).exists(), "unregister never deletes files"  # type: ignore[union-attr]


def test_delta_view_in_hms(hms, view_project, unique_name) -> None:
    project = view_project(register=["hive"], fmt="delta", hive={"uri": hms.uri})
    namespace = project.views[unique_name].namespace
    path = delta_location(project, unique_name)
    delta_table(Path(path), {1: (10, "a")})
    registrar = HiveRegistrar(hms.uri)
    registrar.register(published_table(project, unique_name))
    registration = registrar.registered(namespace, unique_name)
    assert registration is not None
    assert registration.location.removeprefix("file:") == path  # HMS stores file: URIs
    assert registration.parameters["spark.sql.sources.provider"] == "delta"
    assert registration.parameters["table_type"] == "DELTA"
    assert registration.parameters["EXTERNAL"] == "TRUE"
    from lakeview.sql.duck import connect

    assert connect("delta").sql(f"SELECT * FROM delta_scan('{path}')").fetchall() == [(1, 10, "a")]


def test_metastore_down_is_a_transient_registrar_error(view_project, unique_name) -> None:
    registrar = HiveRegistrar(f"thrift://127.0.0.1:{free_port()}")
    with pytest.raises(RegistrarError, match="hive thrift://127.0.0.1"):
        registrar.registered("ns", unique_name)
