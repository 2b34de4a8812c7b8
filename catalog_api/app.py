"""The Starlette application: the Iceberg REST catalog mounted at ``/iceberg``.

``build_app`` is composable: other modules pass ``extra_routes`` (e.g. ``/lakeview/v1``,
``/metrics``) and ``middleware``; ``authenticator`` switches on OAuth2 bearer tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from catalog_api.auth.authenticator import PUBLIC_PATHS, Authenticator, AuthMiddleware, token_endpoint
from catalog_api.auth.bind_guard import LoopbackOnly
from catalog_api.auth.tokens import REVOKE_PATH, revocation_endpoint
from catalog_api.iceberg.routes import build_routes
from catalog_api.iceberg.scans import MANIFESTS_PER_TASK, add_scan_routes
from catalog_api.iceberg.views import add_view_routes
from catalog_api.idempotency import IdempotencyMiddleware
from catalog_api.responses import error_response
from catalog_api.store.catalog import CatalogStore


def build_app(
    store: CatalogStore,
    *,
    authenticator: Authenticator | None = None,
    extra_routes: Sequence[BaseRoute] = (),
    middleware: Sequence[Middleware] = (),
    public_paths: frozenset[str] = frozenset(),
    plan_manifests_per_task: int = MANIFESTS_PER_TASK,
) -> Starlette:
    """The catalog app; ``authenticator=None`` is auth mode ``none`` (loopback only, see server.py).
    ``public_paths``: more paths served without a token (the console's page and assets);
    ``plan_manifests_per_task``: data manifests per plan task of server-side scan planning."""

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "warehouse": store.name})

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_response(404, "NotFoundException", f"no route for {request.method} {request.url.path}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return error_response(
            405, "MethodNotAllowedException", f"{request.method} is not allowed on {request.url.path}"
        )

    iceberg_routes = [Route("/v1/oauth/tokens", token_endpoint(authenticator), methods=["POST"])]
    iceberg_routes.append(Route(REVOKE_PATH, revocation_endpoint(authenticator), methods=["POST"]))
    if authenticator is not None and authenticator.codec is not None:
        authenticator.codec.revocations.attach(store.engine)  # revocations shared by every catalog process
    iceberg_routes += build_routes(store, lambda b: (add_view_routes(b), add_scan_routes(b, plan_manifests_per_task)))
    stack = [Middleware(IdempotencyMiddleware, store=store)]  # innermost: replays only authorized requests
    if authenticator is not None:
        stack.insert(
            0, Middleware(AuthMiddleware, authenticator=authenticator, public_paths=PUBLIC_PATHS | public_paths)
        )
    else:  # however the app is served (uvicorn, gunicorn, workers), no auth means loopback connections only
        stack.insert(0, Middleware(LoopbackOnly))
    return Starlette(
        routes=[Route("/healthz", health), Mount("/iceberg", routes=iceberg_routes), *extra_routes],
        middleware=[*middleware, *stack],
        exception_handlers={404: not_found, 405: not_allowed},
    )
