"""Shared fixtures: one real Spark session and one real catalog server per test run."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from lakeview.config.models import ProjectConfig
from lakeview.project import parse_project
from tests.jvm_archive import JAVA_OPTIONS, QUIET, ArchiveBuild, archive_file, submit_args
from tests.stale_temp import remove_in_background

# Every JVM a test starts compiles with C1 only and the serial collector (tests/jvm_archive.py JAVA_OPTIONS).
OWN_SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS" not in os.environ
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", submit_args(JAVA_OPTIONS))
_archive: ArchiveBuild | None = None

ORDERS_SCHEMA = "order_id BIGINT, product_id BIGINT, quantity INT, ts TIMESTAMP"
SALES_SQL = "SELECT product_id, SUM(quantity) AS total_sold, COUNT(*) AS orders FROM orders GROUP BY product_id"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the JVMs' class archive in the background when some test runs Spark."""
    global _archive
    cache = getattr(session.config, "cache", None)  # none under -p no:cacheprovider: no archive (126 MB) then
    if (
        cache
        and OWN_SUBMIT_ARGS
        and not session.config.option.collectonly
        and any("spark" in getattr(item, "fixturenames", ()) for item in session.items)
    ):
        _archive = ArchiveBuild(archive_file(cache.mkdir("jvm-archive"), JAVA_OPTIONS), JAVA_OPTIONS)


def pytest_runtest_setup(item: pytest.Item) -> None:
    use_jvm_archive(timeout=0)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _archive is not None:
        _archive.cancel()  # a run shorter than the build: no JVM left behind


def use_jvm_archive(timeout: float | None) -> None:
    """From now on, the JVMs this process starts (and the processes it starts, through the environment) map
    the archive, once it is built (waiting up to ``timeout`` seconds for it; None: to the end)."""
    global _archive
    if _archive is None or (archive := _archive.ready(timeout)) is None:
        return
    _archive = None
    os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args(f"{JAVA_OPTIONS} -XX:SharedArchiveFile={archive} {QUIET}")


@pytest.fixture(scope="session")
def spark():
    from spark_jobs.session import build_session

    use_jvm_archive(timeout=None)  # the shared session maps it too
    session = build_session("lakeview-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session", autouse=True)
def _old_runs_removed(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Older runs' temporary directories go in the background now, not at the end (tests/stale_temp.py)."""
    remove_in_background(pytestconfig, tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def lake_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="session")
def catalog_server(lake_dir: Path) -> Iterator[CatalogServer]:
    """The real catalog service on a free loopback port, SQLite store, for the whole run."""
    store = CatalogStore(f"sqlite:///{lake_dir / 'catalog.db'}", lake_dir / "warehouse", "lakeview")
    with CatalogServer(store, host="127.0.0.1", port=0) as server:
        yield server


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """A real S3 server (SeaweedFS ``weed mini``) on free loopback ports, for the whole run."""
    from tests.s3_server import SeaweedS3

    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs")).start()
    yield server
    server.discard()  # the run's temporary data: no graceful stop to wait for


@pytest.fixture()
def rest_catalog(catalog_server: CatalogServer):
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog("tests", uri=catalog_server.uri, warehouse="lakeview")


@pytest.fixture()
def make_project(catalog_server: CatalogServer, lake_dir: Path, tmp_path: Path) -> Callable[..., ProjectConfig]:
    """A project whose warehouse and store are the session catalog's, with its own landing dir."""

    def make(
        views: dict[str, dict[str, Any]] | None = None, sources: dict[str, dict[str, Any]] | None = None
    ) -> ProjectConfig:
        data = {
            "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
            "server": {"host": "127.0.0.1", "port": catalog_server.port},
            "sources": sources
            or {"orders": {"format": "json", "path": str(tmp_path / "landing" / "orders"), "schema": ORDERS_SCHEMA}},
            "views": views or {},
        }
        return parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)

    return make


@pytest.fixture()
def unique_name(request: pytest.FixtureRequest) -> str:
    """A table name unique to the test (the catalog is shared across the session)."""
    import re

    return re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:60].lower()
