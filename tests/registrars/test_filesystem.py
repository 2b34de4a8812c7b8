"""Filesystem registrar: path-based readers (DuckDB ``iceberg_scan(dir)``, Spark's hadoop catalog,
DuckDB ``delta_scan``) find the newest snapshot with no catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog_api.registrars.filesystem import VERSION_HINT, FilesystemRegistrar
from catalog_api.registrars.service import delta_location, published_table
from lakeview.sql.duck import connect
from tests.registrars.conftest import commit, delta_table, iceberg_writer, sorted_rows


def test_iceberg_version_hint_follows_every_commit(view_project, rest_catalog, unique_name, spark) -> None:
    project = view_project(register=["filesystem"])
    namespace = project.views[unique_name].namespace
    writer = iceberg_writer(rest_catalog, project, unique_name)
    registrar = FilesystemRegistrar()
    commit(writer, unique_name, 0, {1: (10, "a"), 2: (20, "b")})
    registrar.register(published_table(project, unique_name))

    table_dir = Path(published_table(project, unique_name).location.removeprefix("file://"))
    duck = connect("avro", "iceberg")
    scan = f"SELECT product_id, total_sold, label FROM iceberg_scan('{table_dir}') ORDER BY 1"
    assert duck.sql(scan).fetchall() == [(1, 10, "a"), (2, 20, "b")]

    commit(writer, unique_name, 1, {2: (25, "b"), 3: (30, "c")})
    newest = published_table(project, unique_name)
    registrar.register(newest)
    registrar.register(newest)  # idempotent
    hint = (table_dir / "metadata" / VERSION_HINT).read_text()
    assert (table_dir / "metadata" / f"v{hint}.metadata.json").read_bytes() == Path(
        newest.metadata_location.removeprefix("file://")  # type: ignore[union-attr]
    ).read_bytes()
    expected = sorted_rows(rest_catalog.load_table((namespace, unique_name)).scan().to_arrow())
    assert duck.sql(scan).fetchall() == expected == [(1, 10, "a"), (2, 25, "b"), (3, 30, "c")]

    # Spark's hadoop catalog over the warehouse: the namespace directory is "<namespace>.db".
    warehouse = table_dir.parent.parent
    spark.conf.set("spark.sql.catalog.lv_paths", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set("spark.sql.catalog.lv_paths.type", "hadoop")
    spark.conf.set("spark.sql.catalog.lv_paths.warehouse", str(warehouse))
    spark.sql(f"REFRESH TABLE lv_paths.`{table_dir.parent.name}`.`{unique_name}`")
    got = spark.sql(
        f"SELECT product_id, total_sold, label FROM lv_paths.`{table_dir.parent.name}`.`{unique_name}`"
    ).collect()
    assert sorted((r[0], r[1], r[2]) for r in got) == expected

    assert registrar.unregister(namespace, unique_name) is True
    assert not (table_dir / "metadata" / VERSION_HINT).exists()
    assert registrar.registered(namespace, unique_name) is None


def test_delta_is_self_describing(view_project, unique_name) -> None:
    project = view_project(register=["filesystem"], fmt="delta")
    namespace = project.views[unique_name].namespace
    path = delta_location(project, unique_name)
    delta_table(path, {1: (10, "a"), 2: (20, "b")})
    registrar = FilesystemRegistrar()
    registrar.register(published_table(project, unique_name))
    registration = registrar.registered(namespace, unique_name)
    assert registration is not None and registration.format == "delta"
    assert connect("delta").sql(f"SELECT * FROM delta_scan('{path}') ORDER BY 1").fetchall() == [
        (1, 10, "a"),
        (2, 20, "b"),
    ]


def test_non_local_location_is_refused(view_project, unique_name) -> None:
    from catalog_api.registrars.base import PublishedTable
    from lakeview.errors import RegistrarError

    table = PublishedTable("ns", "v", "delta", "s3://bucket/ns/v", schema=__import__("pyarrow").schema([]))
    with pytest.raises(RegistrarError, match="not a local path"):
        FilesystemRegistrar().register(table)
