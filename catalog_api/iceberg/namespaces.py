"""Namespace routes: list (only what the caller may see), create, load and HEAD, drop, update properties."""

from __future__ import annotations

from pydantic import BaseModel, Field
from pyiceberg.catalog.rest import NamespaceResponse, UpdateNamespacePropertiesResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from catalog_api.auth.access import Privilege, authorize, can_see, is_warehouse_admin
from catalog_api.iceberg.routing import RouteBuilder, namespace_param, paginate, parse_namespace
from catalog_api.responses import model_response, parse_body
from lakeview import errors


class CreateNamespaceRequest(BaseModel):
    namespace: list[str]
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespaceRequest(BaseModel):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


def add_namespace_routes(builder: RouteBuilder) -> None:
    """Register the namespace endpoints on ``builder`` (and so in ``/v1/config`` ``endpoints``)."""
    store = builder.store

    async def list_namespaces(request: Request) -> Response:
        parent = parse_namespace(request.query_params["parent"]) if request.query_params.get("parent") else ()
        if parent:
            authorize(request, parent, Privilege.READ)
        namespaces = await run_in_threadpool(store.list_namespaces, parent)
        page, token = paginate(request, [list(ns) for ns in namespaces if can_see(request, ns)])
        return JSONResponse({"namespaces": page, **({"next-page-token": token} if token else {})})

    async def create_namespace(request: Request) -> Response:
        body = await parse_body(request, CreateNamespaceRequest)
        if not body.namespace:
            raise errors.BadRequestError("namespace must have at least one level")
        namespace = tuple(body.namespace)
        authorize(request, namespace, Privilege.ADMIN)
        if "location" in body.properties:
            location = body.properties["location"]
            store.confinement.check_namespace_location(namespace, location, is_warehouse_admin(request))
        await run_in_threadpool(store.create_namespace, namespace, body.properties)
        return model_response(NamespaceResponse(namespace=namespace, properties=body.properties))

    async def load_namespace(request: Request) -> Response:
        namespace = namespace_param(request)
        properties = await run_in_threadpool(store.load_namespace, namespace)
        if request.method == "HEAD":
            return Response(status_code=204)
        return model_response(NamespaceResponse(namespace=namespace, properties=properties))

    async def drop_namespace(request: Request) -> Response:
        await run_in_threadpool(store.drop_namespace, namespace_param(request))
        return Response(status_code=204)

    async def update_namespace(request: Request) -> Response:
        body = await parse_body(request, UpdateNamespaceRequest)
        if "location" in body.updates:
            location = body.updates["location"]
            store.confinement.check_namespace_location(namespace_param(request), location, is_warehouse_admin(request))
        summary = await run_in_threadpool(
            store.update_namespace, namespace_param(request), set(body.removals), body.updates
        )
        return model_response(UpdateNamespacePropertiesResponse(**summary))

    ns = "/v1/{prefix}/namespaces/{namespace}"
    builder.add("GET", "/v1/{prefix}/namespaces", list_namespaces, None)
    builder.add("POST", "/v1/{prefix}/namespaces", create_namespace, None)
    builder.add("GET", ns, load_namespace, Privilege.READ)
    builder.endpoints.append(f"HEAD {ns}")
    builder.add("DELETE", ns, drop_namespace, Privilege.ADMIN)
    builder.add("POST", f"{ns}/properties", update_namespace, Privilege.ADMIN)
