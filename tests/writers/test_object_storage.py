"""Both formats against a real S3 server (SeaweedFS): written through ``[lake] warehouse =
"s3://bucket/prefix"``, read back from DuckDB (httpfs) and pyiceberg / deltalake."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from catalog_api.ops import view_tables as tables
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import open_store
from lakeview.config.models import ProjectConfig, file_io_properties
from lakeview.ivm.commits import Change, Epoch
from lakeview.project import parse_project
from lakeview.sql.duck import attach_sql, connect
from tests.s3_server import ACCESS_KEY, SECRET_KEY
from writers.registry import make_writer

BUCKET = "lake-tests"
SQL = "SELECT product_id, SUM(quantity) AS total_sold, COUNT(*) AS orders FROM orders GROUP BY product_id"


def s3_project(s3_server, tmp_path: Path, view: str, fmt: str) -> ProjectConfig:
    s3_server.create_bucket_when_ready(BUCKET)
    data = {
        "lake": {
            "warehouse": f"s3://{BUCKET}/wh",
            "catalog_store": f"sqlite:///{tmp_path / 'catalog.db'}",
            "s3": {"endpoint": s3_server.endpoint, "region": "us-east-1"},
        },
        "sources": {
            "orders": {"format": "json", "path": str(tmp_path / "landing"), "schema": "product_id BIGINT, quantity INT"}
        },
        "views": {view: {"sql": SQL, "format": fmt, "namespace": "s3_tests"}},
    }
    return parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_views_on_s3_are_readable_from_duckdb_and_native_readers(
    fmt: str, s3_server, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Credentials from the usual AWS environment variables, endpoint from the config.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    view = unique_name
    project = s3_project(s3_server, tmp_path, view, fmt)
    schema = pa.schema([("product_id", pa.int64()), ("total_sold", pa.int64()), ("orders", pa.int64())])
    with CatalogServer(open_store(project), host="127.0.0.1", port=0) as server:
        writer = make_writer(project, view, server.uri)
        writer.ensure_table(schema, ("product_id",), {})
        writer.commit(
            Epoch(view, 0, {"orders": 1}),
            Change(
                pa.table({"product_id": [1, 2, None], "total_sold": [5, 6, 7], "orders": [1, 1, 1]}), ("product_id",)
            ),
        )
        record = writer.commit(
            Epoch(view, 1, {"orders": 2}),
            Change(pa.table({"product_id": [2], "total_sold": [16], "orders": [2]}), ("product_id",)),
        )
        assert record is not None and record.rows_deleted == 1
        expected = [(1, 5, 1), (2, 16, 2), (None, 7, 1)]

        con = connect("avro", "httpfs", "iceberg", "delta")
        con.execute(project.lake.s3.duckdb_secret_sql())
        if fmt == "iceberg":
            con.execute(attach_sql(server.uri, project.lake.name))
            from pyiceberg.catalog.rest import RestCatalog

            catalog = RestCatalog("reader", uri=server.uri, warehouse=project.lake.name, **file_io_properties(project))
            native = catalog.load_table(("s3_tests", view)).scan().to_arrow()
            duck = con.sql(f"SELECT product_id, total_sold, orders FROM lake.s3_tests.{view}").fetchall()
        else:
            native = tables.read_rows(project, view)
            duck = con.sql(
                f"SELECT product_id, total_sold, orders FROM delta_scan('{project.table_location(view)}')"
            ).fetchall()
        assert sorted(duck, key=repr) == sorted(expected, key=repr)
        assert sorted((tuple(r.values()) for r in native.to_pylist()), key=repr) == sorted(expected, key=repr)
        assert tables.last_commit(project, view).epoch == 1  # type: ignore[union-attr]

    # The table's files are in the bucket, under the warehouse prefix; nothing but local state on disk.
    keys = s3_server.keys(BUCKET, "wh/s3_tests")
    assert any(k.endswith(".parquet") for k in keys)
    assert not any(p.suffix == ".parquet" for p in tmp_path.rglob("*"))


@pytest.mark.parametrize(
    ("lake", "key", "problem"),
    [
        ({"warehouse": "gs://bucket/lake"}, "lake.warehouse", "use a local directory or s3://bucket/prefix"),
        ({"warehouse": "s3://"}, "lake.warehouse", "name a bucket"),
        (
            {"warehouse": "s3://b/p", "s3": {"endpont": "http://x"}},
            "lake.s3.endpont",
            "valid keys: access_key_id, endpoint",
        ),
    ],
)
def test_bad_object_storage_config_names_the_key(lake: dict, key: str, problem: str) -> None:
    from lakeview.errors import ConfigError

    with pytest.raises(ConfigError, match=problem) as raised:
        parse_project({"lake": lake})
    assert raised.value.key == key


def test_s3_warehouse_keeps_local_state_next_to_the_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    project = parse_project(
        {"lake": {"warehouse": "s3://b/lake/", "s3": {"endpoint": "http://127.0.0.1:9000"}}}, root=tmp_path
    )
    assert project.warehouse_uri == "s3://b/lake"
    assert project.checkpoint_path("v").is_relative_to(tmp_path / ".lakeview")
    assert project.catalog_store_url == f"sqlite:///{tmp_path / '.lakeview' / 'catalog.db'}"
    options = project.lake.s3.delta_options()
    assert options["AWS_ACCESS_KEY_ID"] == "from-env" and options["AWS_ALLOW_HTTP"] == "true"
    assert file_io_properties(project)["s3.endpoint"] == "http://127.0.0.1:9000"
