"""``GET /v1/config``: the warehouse prefix, the endpoints served and the idempotency-key lifetime."""

from __future__ import annotations

from pyiceberg.catalog.rest import ConfigResponse
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from catalog_api.iceberg.routing import RouteBuilder, builder_endpoint
from lakeview import errors

IDEMPOTENCY_LIFETIME = "PT30M"


def add_config_route(builder: RouteBuilder) -> None:
    """Serve ``/v1/config``; it lists ``builder.endpoints`` as they are when it is asked."""
    store = builder.store

    async def get_config(request: Request) -> Response:
        warehouse = request.query_params.get("warehouse")
        if warehouse and warehouse not in (store.name, store.warehouse):
            raise errors.NotFoundError(f"unknown warehouse {warehouse!r}; this catalog serves {store.name!r}")
        data = ConfigResponse(defaults={}, overrides={"prefix": store.name}).model_dump(exclude_none=True)
        data["endpoints"] = builder.endpoints
        data["idempotency-key-lifetime"] = IDEMPOTENCY_LIFETIME
        return JSONResponse(data)

    builder.routes.append(Route("/v1/config", builder_endpoint(builder, get_config), methods=["GET"]))
