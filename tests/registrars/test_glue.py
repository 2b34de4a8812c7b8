"""Glue registrar against a real moto Glue server: readers find each view through Glue."""

from __future__ import annotations

import pytest

from catalog_api.registrars.glue import GlueRegistrar
from catalog_api.registrars.service import delta_location, published_table
from lakeview.errors import RegistrarConflictError
from tests.registrars.conftest import commit, delta_table, iceberg_writer, sorted_rows


def glue_catalog(endpoint: str):
    from pyiceberg.catalog.glue import GlueCatalog

    return GlueCatalog(
        "glue",
        **{
            "glue.endpoint": endpoint,
            "glue.region": "us-east-1",
            "client.access-key-id": "testing",
            "client.secret-access-key": "testing",
        },
    )


def test_iceberg_view_is_found_through_glue_and_its_pointer_moves(
    moto, glue_client, view_project, rest_catalog, unique_name
) -> None:
    project = view_project(register=["glue"])
    namespace = project.views[unique_name].namespace
    writer = iceberg_writer(rest_catalog, project, unique_name)
    commit(writer, unique_name, 0, {1: (10, "a"), 2: (20, "b")})
    registrar = GlueRegistrar(endpoint=moto.endpoint)

    first = published_table(project, unique_name)
    registrar.register(first)
    registrar.register(first)  # idempotent: no new Glue table version

    entry = glue_client.get_table(DatabaseName=namespace, Name=unique_name)["Table"]
    assert entry["TableType"] == "EXTERNAL_TABLE"
    assert entry["Parameters"]["table_type"] == "ICEBERG"
    assert entry["Parameters"]["metadata_location"] == first.metadata_location
    assert "previous_metadata_location" not in entry["Parameters"]
    assert entry["Parameters"]["lakeview.sql.trino"].startswith("SELECT product_id")
    columns = [(c["Name"], c["Type"]) for c in entry["StorageDescriptor"]["Columns"]]
    assert columns == [("product_id", "bigint"), ("total_sold", "bigint"), ("label", "string")]
    assert len(glue_client.get_table_versions(DatabaseName=namespace, TableName=unique_name)["TableVersions"]) == 1

    glue = glue_catalog(moto.endpoint)
    assert sorted_rows(glue.load_table((namespace, unique_name)).scan().to_arrow()) == [(1, 10, "a"), (2, 20, "b")]

    commit(writer, unique_name, 1, {2: (25, "b"), 3: (30, "c")})
    second = published_table(project, unique_name)
    registrar.register(second)
    params = glue_client.get_table(DatabaseName=namespace, Name=unique_name)["Table"]["Parameters"]
    assert params["metadata_location"] == second.metadata_location
    assert params["previous_metadata_location"] == first.metadata_location
    lakeview_rows = sorted_rows(rest_catalog.load_table((namespace, unique_name)).scan().to_arrow())
    assert (
        sorted_rows(glue.load_table((namespace, unique_name)).scan().to_arrow())
        == lakeview_rows
        == [(1, 10, "a"), (2, 25, "b"), (3, 30, "c")]
    )

    # A stale publish (an older metadata file) never moves the pointer backwards.
    with pytest.raises(RegistrarConflictError, match="newer than Lakeview's"):
        registrar.register(first)

    assert registrar.unregister(namespace, unique_name) is True
    assert registrar.unregister(namespace, unique_name) is False
    assert registrar.registered(namespace, unique_name) is None


def test_delta_view_is_registered_with_provider_and_location(moto, glue_client, view_project, unique_name) -> None:
    project = view_project(register=["glue"], fmt="delta")
    namespace = project.views[unique_name].namespace
    path = delta_location(project, unique_name)
    delta_table(path, {1: (10, "a")})
    registrar = GlueRegistrar(endpoint=moto.endpoint)
    registrar.register(published_table(project, unique_name))

    entry = glue_client.get_table(DatabaseName=namespace, Name=unique_name)["Table"]
    assert entry["TableType"] == "EXTERNAL_TABLE"
    assert entry["Parameters"]["spark.sql.sources.provider"] == "delta"
    assert entry["Parameters"]["table_type"] == "DELTA"
    assert "metadata_location" not in entry["Parameters"]
    assert entry["StorageDescriptor"]["Location"] == str(path)
    assert [(c["Name"], c["Type"]) for c in entry["StorageDescriptor"]["Columns"]] == [
        ("product_id", "bigint"),
        ("total_sold", "bigint"),
        ("label", "string"),
    ]
    # A reader that follows the Glue location reads the rows.
    from lakeview.sql.duck import connect

    rows = connect("delta").sql(f"SELECT * FROM delta_scan('{entry['StorageDescriptor']['Location']}')").fetchall()
    assert rows == [(1, 10, "a")]


def test_entry_not_created_by_lakeview_is_never_overwritten(
    moto, glue_client, view_project, rest_catalog, unique_name
) -> None:
    project = view_project(register=["glue"])
    namespace = project.views[unique_name].namespace
    commit(iceberg_writer(rest_catalog, project, unique_name), unique_name, 0, {1: (1, "x")})
    glue_client.create_database(DatabaseInput={"Name": namespace})
    glue_client.create_table(
        DatabaseName=namespace, TableInput={"Name": unique_name, "Parameters": {"owner": "someone"}}
    )
    with pytest.raises(RegistrarConflictError, match="not created by Lakeview"):
        GlueRegistrar(endpoint=moto.endpoint).register(published_table(project, unique_name))
    assert glue_client.get_table(DatabaseName=namespace, Name=unique_name)["Table"]["Parameters"] == {
        "owner": "someone"
    }


def test_concurrent_update_is_reread_and_retried_not_overwritten(
    moto, glue_client, view_project, rest_catalog, unique_name
) -> None:
    """moto ignores VersionId, so Glue's optimistic lock is simulated at one point only: the
    boto3 client's update_table. On the first call a second, real writer changes the entry in
    moto between our read and our write, then the call fails with ConcurrentModificationException
    (what Glue answers for a stale VersionId). The registrar must re-read and keep that change."""
    project = view_project(register=["glue"])
    namespace = project.views[unique_name].namespace
    writer = iceberg_writer(rest_catalog, project, unique_name)
    commit(writer, unique_name, 0, {1: (1, "x")})
    first = published_table(project, unique_name)
    GlueRegistrar(endpoint=moto.endpoint).register(first)
    commit(writer, unique_name, 1, {1: (2, "x")})
    second = published_table(project, unique_name)

    import boto3

    client = boto3.client("glue", endpoint_url=moto.endpoint, region_name="us-east-1")
    real_update = client.update_table
    seen_versions: list[str] = []

    def update_table(**kwargs):
        seen_versions.append(kwargs["VersionId"])
        if len(seen_versions) == 1:
            current = glue_client.get_table(DatabaseName=namespace, Name=unique_name)["Table"]
            other = {k: current[k] for k in ("Name", "TableType", "StorageDescriptor")}
            other["Parameters"] = {**current["Parameters"], "comment": "changed by another writer"}
            glue_client.update_table(DatabaseName=namespace, TableInput=other)
            raise client.exceptions.ConcurrentModificationException(
                {"Error": {"Code": "ConcurrentModificationException", "Message": "stale VersionId"}}, "UpdateTable"
            )
        return real_update(**kwargs)

    client.update_table = update_table
    GlueRegistrar(client=client).register(second)

    assert len(seen_versions) == 2 and seen_versions[0] != seen_versions[1], "re-read before retrying"
    params = glue_client.get_table(DatabaseName=namespace, Name=unique_name)["Table"]["Parameters"]
    assert params["comment"] == "changed by another writer", "the other writer's change survived"
    assert params["metadata_location"] == second.metadata_location
    assert params["previous_metadata_location"] == first.metadata_location
