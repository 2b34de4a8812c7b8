"""Every Iceberg REST route under the ``/iceberg`` mount, in match order (loadTable, the hot
path, first); each resource's module adds its own."""

from __future__ import annotations

from collections.abc import Callable

from starlette.routing import Route

from catalog_api.iceberg.config import add_config_route
from catalog_api.iceberg.namespaces import add_namespace_routes
from catalog_api.iceberg.routing import RouteBuilder
from catalog_api.iceberg.tables import add_table_routes
from catalog_api.iceberg.transactions import add_transaction_routes
from catalog_api.store.catalog import CatalogStore


def build_routes(store: CatalogStore, extra: Callable[[RouteBuilder], None] | None = None) -> list[Route]:
    """The catalog's routes, relative to the ``/iceberg`` mount; ``extra`` adds more (views, scans)."""
    builder = RouteBuilder(store)
    add_table_routes(builder)  # loadTable's route first: the hot path matches on the first try
    add_config_route(builder)
    add_namespace_routes(builder)
    add_transaction_routes(builder)
    if extra is not None:
        extra(builder)
    return builder.routes
