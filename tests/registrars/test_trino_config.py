"""Trino: generated catalog files use only property names from Trino's documentation, and
``query --engine trino`` fails clearly when no server answers. No Trino server runs here."""

from __future__ import annotations

import pytest

from lakeview.cli.main import main
from lakeview.cli.trino import catalog_files, render
from tests.registrars.conftest import free_port

# Reference: property names as documented by Trino (docs/src/main/sphinx/object-storage/
# metastores.md: "Iceberg REST catalog configuration properties", "Thrift metastore configuration
# properties", "AWS Glue catalog configuration properties", "General metastore configuration
# properties"; connector/delta-lake.md and connector/iceberg.md for connector.name).
DOCUMENTED = {
    "connector.name": {"iceberg", "delta_lake"},
    "iceberg.catalog.type": {"hive_metastore", "glue", "jdbc", "rest", "nessie", "snowflake"},
    "hive.metastore": {"thrift", "glue"},
    "iceberg.rest-catalog.uri": None,
    "iceberg.rest-catalog.prefix": None,
    "iceberg.rest-catalog.warehouse": None,
    "iceberg.rest-catalog.parent-namespace": None,
    "iceberg.rest-catalog.security": {"NONE", "OAUTH2"},
    "iceberg.rest-catalog.session": {"NONE", "USER"},
    "iceberg.rest-catalog.oauth2.token": None,
    "iceberg.rest-catalog.oauth2.credential": None,
    "iceberg.rest-catalog.oauth2.scope": None,
    "iceberg.rest-catalog.vended-credentials-enabled": None,
    "hive.metastore.uri": None,
    "hive.metastore.glue.region": None,
    "hive.metastore.glue.endpoint-url": None,
    "hive.metastore.glue.catalogid": None,
}


def check_documented(properties: dict[str, str]) -> None:
    for key, value in properties.items():
        assert key in DOCUMENTED, f"{key} is not a documented Trino property"
        allowed = DOCUMENTED[key]
        assert allowed is None or value in allowed, f"{key}={value} is not a documented value ({sorted(allowed)})"


def test_rest_glue_and_hms_catalog_files_use_documented_properties(view_project) -> None:
    project = view_project(
        register=["glue", "hive"],
        glue={"endpoint": "http://127.0.0.1:5000", "region": "eu-west-1", "catalog_id": "123456789012"},
        hive={"uri": "thrift://metastore:9083"},
    )
    files = catalog_files(project)
    assert set(files) == {
        "lakeview.properties",
        "lakeview_glue.properties",
        "lakeview_glue_delta.properties",
        "lakeview_hive.properties",
        "lakeview_hive_delta.properties",
    }
    for properties in files.values():
        check_documented(properties)
    assert files["lakeview.properties"] == {
        "connector.name": "iceberg",
        "iceberg.catalog.type": "rest",
        "iceberg.rest-catalog.uri": project.catalog_uri,
        "iceberg.rest-catalog.warehouse": "lakeview",
    }
    assert files["lakeview_glue.properties"]["hive.metastore.glue.endpoint-url"] == "http://127.0.0.1:5000"
    assert files["lakeview_glue_delta.properties"]["hive.metastore"] == "glue"
    assert files["lakeview_hive.properties"]["iceberg.catalog.type"] == "hive_metastore"
    assert files["lakeview_hive_delta.properties"]["hive.metastore.uri"] == "thrift://metastore:9083"

    oauth = catalog_files(project, credential="trino:s3cret")["lakeview.properties"]
    check_documented(oauth)
    assert (
        oauth["iceberg.rest-catalog.security"] == "OAUTH2"
        and oauth["iceberg.rest-catalog.oauth2.credential"] == "trino:s3cret"
    )


def test_shipped_deploy_files_use_documented_properties() -> None:
    from pathlib import Path

    shipped = sorted(Path(__file__).parents[2].joinpath("deploy", "trino", "catalog").glob("*.properties"))
    assert len(shipped) >= 5
    for path in shipped:
        pairs = [line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#")]
        check_documented(
            {k: v for k, v in pairs if not v.startswith("<")} | {k: "x" for k, v in pairs if v.startswith("<")}
        )


def test_trino_config_prints_files_and_query_without_server_is_a_clear_error(view_project, capsys, tmp_path) -> None:
    project = view_project()
    (tmp_path / "lakeview.toml").write_text(
        f'[lake]\nwarehouse = "{project.lake.warehouse}"\n[server]\nport = {project.server.port}\n'
    )
    main(["trino-config", "-p", str(tmp_path)])
    out = capsys.readouterr().out
    assert render("lakeview.properties", catalog_files(project)["lakeview.properties"]) in out

    port = free_port()  # nothing listens there
    with pytest.raises(SystemExit) as done:
        main(["query", "SELECT 1", "-p", str(tmp_path), "--engine", "trino", "--server", f"http://127.0.0.1:{port}"])
    assert done.value.code == 2
    assert f"no Trino server answers at http://127.0.0.1:{port}" in capsys.readouterr().err
