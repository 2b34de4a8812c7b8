"""Iceberg REST view routes: list, create, load, HEAD, replace/commit, drop, rename, register-view."""

from __future__ import annotations

from pyiceberg.catalog.rest import CreateViewRequest, RegisterViewRequest
from pyiceberg.view.metadata import ViewMetadata
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from catalog_api.auth.access import Privilege
from catalog_api.iceberg.routing import RouteBuilder, namespace_param, paginate, rename_pair
from catalog_api.responses import parse_body
from catalog_api.store.catalog import check_name
from catalog_api.store.views import CommitViewRequest, ViewCatalog
from lakeview import errors


def add_view_routes(builder: RouteBuilder) -> None:
    """Register the view endpoints on ``builder`` (and so in ``/v1/config`` ``endpoints``)."""
    views = ViewCatalog(builder.store)

    def view_param(request: Request) -> tuple[str, ...]:
        return (*namespace_param(request), check_name("view", request.path_params["view"]))

    def view_response(location: str, metadata: ViewMetadata) -> Response:
        body = {
            "metadata-location": location,
            "metadata": metadata.model_dump(mode="json", by_alias=True, exclude_none=True),
            "config": {},
        }
        return JSONResponse(body)

    async def list_views(request: Request) -> Response:
        names = await run_in_threadpool(views.list_views, namespace_param(request))
        page, token = paginate(request, [{"namespace": list(v[:-1]), "name": v[-1]} for v in names])
        return JSONResponse({"identifiers": page, **({"next-page-token": token} if token else {})})

    async def create_view(request: Request) -> Response:
        namespace = namespace_param(request)
        body = await parse_body(request, CreateViewRequest, {"location": None})
        location, metadata = await run_in_threadpool(
            views.create_view,
            (*namespace, body.name),
            body.view_schema,
            body.view_version,
            body.location,
            body.properties,
        )
        return view_response(location, metadata)

    async def load_view(request: Request) -> Response:
        identifier = view_param(request)
        if request.method == "HEAD":
            if not await run_in_threadpool(views.view_exists, identifier):
                raise errors.NoSuchViewError(f"View does not exist: {'.'.join(identifier)}")
            return Response(status_code=204)
        return view_response(*await run_in_threadpool(views.load_view, identifier))

    async def commit_view(request: Request) -> Response:
        body = await parse_body(request, CommitViewRequest)
        location, metadata = await run_in_threadpool(
            views.commit_view, view_param(request), body.requirements, body.updates
        )
        return view_response(location, metadata)

    async def drop_view(request: Request) -> Response:
        await run_in_threadpool(views.drop_view, view_param(request))
        return Response(status_code=204)

    async def rename_view(request: Request) -> Response:
        source, target = await rename_pair(request)
        await run_in_threadpool(views.rename_view, source, target)
        return Response(status_code=204)

    async def register_view(request: Request) -> Response:
        body = await parse_body(request, RegisterViewRequest)
        return view_response(
            *await run_in_threadpool(
                views.register_view, (*namespace_param(request), body.name), body.metadata_location
            )
        )

    ns = "/v1/{prefix}/namespaces/{namespace}"
    view = f"{ns}/views/{{view}}"
    builder.add("GET", f"{ns}/views", list_views, Privilege.READ)
    builder.add("POST", f"{ns}/views", create_view, Privilege.WRITE)
    builder.add("GET", view, load_view, Privilege.READ)
    builder.endpoints.append(f"HEAD {view}")
    builder.add("POST", view, commit_view, Privilege.WRITE)
    builder.add("DELETE", view, drop_view, Privilege.WRITE)
    builder.add("POST", "/v1/{prefix}/views/rename", rename_view, None)
    builder.add("POST", f"{ns}/register-view", register_view, Privilege.WRITE)
