"""Catalog fixtures: a real PostgreSQL 15 and a catalog server on it; one behaviour suite, two stores."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from catalog_api.store.local_postgres import LocalPostgres
from lakeview.errors import SetupError


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    """A private PostgreSQL 15 on 127.0.0.1 (fails naming the Debian package when it is missing)."""
    try:
        server = LocalPostgres().start()
    except SetupError as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pg-lake") / "warehouse"


@pytest.fixture(scope="session")
def pg_catalog_server(postgres: LocalPostgres, pg_warehouse: Path) -> Iterator[CatalogServer]:
    store = CatalogStore(postgres.url, pg_warehouse, "lakeview")
    with CatalogServer(store, host="127.0.0.1", port=0) as server:
        yield server
    store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_catalog(request: pytest.FixtureRequest) -> CatalogServer:
    """The same running catalog API on each store backend."""
    return request.getfixturevalue("catalog_server" if request.param == "sqlite" else "pg_catalog_server")


@pytest.fixture()
def any_rest_catalog(any_catalog: CatalogServer):
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog("tests", uri=any_catalog.uri, warehouse="lakeview")


@pytest.fixture()
def unique_name(request: pytest.FixtureRequest) -> str:
    """A namespace name unique to the test and its parameters (the catalogs live for the session)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:40].lower() + "_" + uuid.uuid4().hex[:8]
