"""Registrar fixtures: a real moto Glue server per test run, and views committed through the
real catalog (Iceberg) or delta-rs (Delta) for registrars to publish."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_api.server import free_port
from lakeview.config.models import ProjectConfig
from lakeview.ivm.commits import Change, Epoch
from lakeview.project import parse_project
from tests.registrars.hms import BridgedMetastore, can_unshare
from writers.iceberg.writer import IcebergWriter

MOTO = str(Path(sys.executable).with_name("moto_server"))
SCHEMA = pa.schema([("product_id", pa.int64()), ("total_sold", pa.int64()), ("label", pa.string())])


class MotoServer:
    """``moto_server -H 127.0.0.1 -p PORT``; can be stopped and started again on the same port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MotoServer:
        self.process = subprocess.Popen(
            [MOTO, "-H", "127.0.0.1", "-p", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(f"moto_server exited with {self.process.returncode}") from None
                time.sleep(0.05)
        raise RuntimeError("moto_server did not start within 30 s")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture(scope="session", autouse=True)
def aws_env() -> Iterator[None]:
    """Fake credentials for boto3 (moto accepts any); never real ones."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            mp.delenv(name, raising=False)
        yield


@pytest.fixture(scope="session")
def moto(aws_env: None) -> Iterator[MotoServer]:
    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def hms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgedMetastore]:
    """A real Hive Metastore 2.3.9 (pyspark's jars) in a private network namespace, one per run."""
    if shutil.which("java") is None:
        pytest.skip("HMS needs Java 17")
    if not can_unshare():
        pytest.skip("unshare -n is not permitted here, and HMS 2.3 must not bind a shared network")
    metastore = BridgedMetastore(tmp_path_factory.mktemp("hms")).start()
    yield metastore
    metastore.stop()


@pytest.fixture()
def glue_client(moto: MotoServer):
    import boto3

    return boto3.client("glue", endpoint_url=moto.endpoint, region_name="us-east-1")


@pytest.fixture()
def view_project(make_project, unique_name: str) -> Callable[..., ProjectConfig]:
    """A project with one keyed-aggregate view named after the test, in its own namespace."""

    def make(*, register: list[str] | None = None, fmt: str = "iceberg", **sections: dict) -> ProjectConfig:
        view = {
            "sql": "SELECT product_id, SUM(quantity) AS total_sold, MAX(label) AS label FROM orders GROUP BY product_id",
            "namespace": f"ns_{unique_name}"[:60],
            "format": fmt,
            "register": register or [],
        }
        sources = {
            "orders": {
                "format": "json",
                "path": "/nonexistent/orders",
                "schema": "product_id BIGINT, quantity INT, label STRING",
            }
        }
        base = make_project(views={unique_name: {**view, "register": []}}, sources=sources)
        data = {
            "lake": {"warehouse": base.lake.warehouse, "catalog_store": base.lake.catalog_store},
            "server": {"host": base.server.host, "port": base.server.port},
            "sources": sources,
            "views": {unique_name: view},
            **sections,
        }
        return parse_project(data, file=base.file, root=base.root)

    return make


def iceberg_writer(rest_catalog, project: ProjectConfig, view: str) -> IcebergWriter:
    from lakeview.sql.dialects import sql_properties

    config = project.views[view]
    writer = IcebergWriter(rest_catalog, config.namespace, view)
    writer.ensure_table(SCHEMA, ("product_id",), sql_properties(config.sql))
    return writer


def commit(writer: IcebergWriter, view: str, epoch: int, rows: dict[int, tuple[int, str]]) -> None:
    table = pa.table(
        {"product_id": list(rows), "total_sold": [v[0] for v in rows.values()], "label": [v[1] for v in rows.values()]},
        schema=SCHEMA,
    )
    assert writer.commit(Epoch(view, epoch, {"orders": epoch}), Change(table, ("product_id",))) is not None


def delta_table(path: Path, rows: dict[int, tuple[int, str]]) -> None:
    from deltalake import write_deltalake

    table = pa.table(
        {"product_id": list(rows), "total_sold": [v[0] for v in rows.values()], "label": [v[1] for v in rows.values()]},
        schema=SCHEMA,
    )
    write_deltalake(str(path), table, mode="overwrite")


def sorted_rows(table: pa.Table) -> list[tuple]:
    return sorted((tuple(r.values()) for r in table.select(SCHEMA.names).to_pylist()), key=repr)
