"""The Starlette application: the Iceberg REST catalog mounted at ``/iceberg``."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from catalog_api.responses import error_response
from catalog_api.routes import build_routes
from catalog_api.store import CatalogStore


def build_app(store: CatalogStore) -> Starlette:
    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "warehouse": store.name})

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_response(404, "NotFoundException", f"no route for {request.method} {request.url.path}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return error_response(405, "MethodNotAllowedException", f"{request.method} is not allowed on {request.url.path}")

    return Starlette(
        routes=[Route("/healthz", health), Mount("/iceberg", routes=build_routes(store))],
        exception_handlers={404: not_found, 405: not_allowed},
    )
