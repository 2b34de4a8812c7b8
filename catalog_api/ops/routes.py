"""Lakeview's own routes next to the Iceberg catalog, under ``/lakeview/v1``:

- ``GET /lakeview/v1/views``: every view's status and freshness (as ``lakeview status --json``);
- ``GET /lakeview/v1/views/{name}``: one view (a parked one: ``state`` "FAILED", ``error``, ``failed_epoch``);
- ``POST /lakeview/v1/views/{name}/resume``: ask the process running the views to restart a FAILED
  view from its last committed epoch (202; lakeview/parking.py);
- ``POST /lakeview/v1/sources/{name}/rows``: land rows into a ``format = "ingest"`` source
  (JSON array or NDJSON; ``Idempotency-Key`` makes a retry a no-op).

When the catalog runs with auth, the auth middleware puts the caller in the request scope:
reading a view needs ``read`` on its namespace, ingesting needs ``write`` on the namespace of
every view that reads the source (the rows flow into those views).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from catalog_api.ops.console.routes import console_api_routes, console_public_paths, console_static_routes
from catalog_api.ops.metrics import RequestLatencyMiddleware, metrics_route
from catalog_api.ops.status import view_status, view_statuses
from catalog_api.registrars.service import with_registrar_reasons
from catalog_api.request_limits import read_body
from catalog_api.responses import from_exception
from lakeview import errors
from lakeview.ops.ingest import SourceIngest
from lakeview.ops.parking import parked, request_resume
from lakeview.sql.planner import plan_for

if TYPE_CHECKING:
    from lakeview.config.models import ProjectConfig


def _authorize(request: Request, namespace: str, write: bool) -> None:
    try:
        from catalog_api.auth.access import Privilege, authorize
    except ImportError:  # a catalog without the access module has no auth
        return
    authorize(request, (namespace,), Privilege.WRITE if write else Privilege.READ)


def _may_read(request: Request, namespace: str) -> bool:
    try:
        _authorize(request, namespace, write=False)
    except errors.CatalogError:
        return False
    return True


def lakeview_routes(project: ProjectConfig, store: Any) -> list[BaseRoute]:
    """The ``/lakeview/v1`` mount for ``build_app(extra_routes=...)``."""

    ingesters: dict[str, SourceIngest] = {}
    readers: dict[str, set[str]] = {}  # source -> namespaces of the views reading it
    for view in project.views.values():
        for source in _sources_of(view.sql):
            readers.setdefault(source, set()).add(view.namespace)

    def one_view(name: str) -> Any:
        return with_registrar_reasons(project, [view_status(project, store, name)])[0]  # REGISTRAR_DOWN as in the list

    async def list_views(request: Request) -> Response:
        statuses = await run_in_threadpool(view_statuses, project, store)
        visible = [s.as_dict() for s in statuses if _may_read(request, project.views[s.view].namespace)]
        return JSONResponse({"views": visible})

    async def get_view(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            if name not in project.views:
                raise errors.NotFoundError(f"no view {name!r}; views: {', '.join(project.views) or 'none'}")
            _authorize(request, project.views[name].namespace, write=False)
            status = await run_in_threadpool(one_view, name)
        except errors.LakeviewError as exc:
            return from_exception(exc)
        return JSONResponse(status.as_dict())

    async def resume_view(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            if name not in project.views:
                raise errors.NotFoundError(f"no view {name!r}; views: {', '.join(project.views) or 'none'}")
            _authorize(request, project.views[name].namespace, write=True)
            if parked(project, name) is None:
                raise errors.BadRequestError(f"view {name!r} is not FAILED; only a parked view resumes")
            await run_in_threadpool(request_resume, project, name)
        except errors.LakeviewError as exc:
            return from_exception(exc)
        return JSONResponse({"view": name, "resume": "requested"}, status_code=202)

    async def post_rows(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            for namespace in sorted(readers.get(name, ())) or [name]:
                _authorize(request, namespace, write=True)
            ingest = ingesters.get(name)
            if ingest is None:
                ingest = ingesters[name] = await run_in_threadpool(SourceIngest, project, name)
            body = await read_body(request)  # at most MAX_BODY_BYTES: a bigger batch is a 413, split it
            key = request.headers.get("idempotency-key")
            result = await run_in_threadpool(ingest.ingest, body, request.headers.get("content-type", ""), key)
        except errors.LakeviewError as exc:
            return from_exception(exc)
        except UnicodeDecodeError:
            return from_exception(errors.BadRequestError("body is not UTF-8"))
        headers = {"Idempotency-Replayed": "true"} if result.replayed else {}
        return JSONResponse(result.as_dict(), headers=headers)

    return [
        Mount(
            "/lakeview/v1",
            routes=[
                *console_api_routes(project, store),  # the console's JSON (lineage, history, snapshots, plans)
                Route("/views", list_views, methods=["GET"]),
                Route("/views/{name}", get_view, methods=["GET"]),
                Route("/views/{name}/resume", resume_view, methods=["POST"]),
                Route("/sources/{name}/rows", post_rows, methods=["POST"]),
            ],
        )
    ]


def _sources_of(sql: str) -> tuple[str, ...]:
    try:
        return tuple(plan_for("_", sql).sources)
    except errors.LakeviewError:
        return ()


def lakeview_app_options(project: ProjectConfig | None, store: Any) -> dict[str, Any]:
    """``build_app``/``CatalogServer`` options that add ``/lakeview/v1``, the console at ``/ui/``,
    ``/metrics`` and the request-latency middleware (``project=None``: metrics only, no views known)."""

    routes: list[BaseRoute] = [metrics_route(project, store)]
    options: dict[str, Any] = {}
    if project is not None:
        routes += lakeview_routes(project, store) + console_static_routes()
        options["public_paths"] = console_public_paths()  # the page asks for a token itself
    return {"extra_routes": routes, "middleware": [Middleware(RequestLatencyMiddleware)], **options}
