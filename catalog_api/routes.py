"""Iceberg REST catalog routes (config, namespaces, tables) under ``/iceberg/v1``.

Request and response bodies are pyiceberg's own pydantic models; the commit logic is the
store's (pyiceberg's). Handlers are plain functions run in Starlette's thread pool because
the store is blocking.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pyiceberg.catalog.rest import (
    ConfigResponse,
    CreateTableRequest,
    ListNamespaceResponse,
    ListTableResponseEntry,
    ListTablesResponse,
    NamespaceResponse,
    TableResponse,
    UpdateNamespacePropertiesResponse,
)
from pyiceberg.table import CommitTableRequest, CommitTableResponse, Table
from pyiceberg.typedef import Identifier
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from catalog_api.responses import from_exception, model_response, parse_body
from catalog_api.store import CatalogStore
from lakeview import errors

NAMESPACE_SEPARATOR = "\x1f"

Handler = Callable[[Request], Awaitable[Response]]

ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
]


class CreateNamespaceRequest(BaseModel):
    namespace: list[str]
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespaceRequest(BaseModel):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


def build_routes(store: CatalogStore) -> list[Route]:
    """The catalog's routes, relative to the ``/iceberg`` mount."""

    def guarded(fn: Callable[..., Any]) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                prefix = request.path_params.get("prefix")
                if prefix is not None and prefix != store.name:
                    raise errors.NotFoundError(f"unknown warehouse prefix {prefix!r}; this catalog serves {store.name!r}")
                return await fn(request)
            except Exception as exc:  # one mapping for every error, see responses.py
                return from_exception(exc)

        return endpoint

    async def get_config(request: Request) -> Response:
        warehouse = request.query_params.get("warehouse")
        if warehouse and warehouse not in (store.name, store.warehouse):
            raise errors.NotFoundError(f"unknown warehouse {warehouse!r}; this catalog serves {store.name!r}")
        body = ConfigResponse(defaults={}, overrides={"prefix": store.name})
        data = body.model_dump()
        data["endpoints"] = ENDPOINTS
        return JSONResponse(data)

    async def list_namespaces(request: Request) -> Response:
        parent = _namespace(request.query_params["parent"]) if "parent" in request.query_params else ()
        namespaces = await run_in_threadpool(store.list_namespaces, parent)
        return model_response(ListNamespaceResponse(namespaces=namespaces))

    async def create_namespace(request: Request) -> Response:
        body = await parse_body(request, CreateNamespaceRequest)
        if not body.namespace:
            raise errors.BadRequestError("namespace must have at least one level")
        await run_in_threadpool(store.create_namespace, tuple(body.namespace), body.properties)
        return model_response(NamespaceResponse(namespace=tuple(body.namespace), properties=body.properties))

    async def load_namespace(request: Request) -> Response:
        namespace = _namespace(request.path_params["namespace"])
        properties = await run_in_threadpool(store.load_namespace, namespace)
        if request.method == "HEAD":
            return Response(status_code=204)
        return model_response(NamespaceResponse(namespace=namespace, properties=properties))

    async def drop_namespace(request: Request) -> Response:
        await run_in_threadpool(store.drop_namespace, _namespace(request.path_params["namespace"]))
        return Response(status_code=204)

    async def update_namespace(request: Request) -> Response:
        body = await parse_body(request, UpdateNamespaceRequest)
        summary = await run_in_threadpool(
            store.update_namespace, _namespace(request.path_params["namespace"]), set(body.removals), body.updates
        )
        return model_response(UpdateNamespacePropertiesResponse(**summary))

    async def list_tables(request: Request) -> Response:
        namespace = _namespace(request.path_params["namespace"])
        tables = await run_in_threadpool(store.list_tables, namespace)
        entries = [ListTableResponseEntry(name=t[-1], namespace=t[:-1]) for t in tables]
        return model_response(ListTablesResponse(identifiers=entries))

    async def create_table(request: Request) -> Response:
        namespace = _namespace(request.path_params["namespace"])
        body = await parse_body(
            request, CreateTableRequest, {"location": None, "partition-spec": None, "write-order": None}
        )
        if body.stage_create:
            raise errors.BadRequestError("stage-create is not supported by this catalog yet")
        table = await run_in_threadpool(
            store.create_table,
            (*namespace, body.name),
            body.table_schema,
            body.location,
            body.partition_spec,
            body.write_order,
            body.properties,
        )
        return _table_response(table)

    async def load_table(request: Request) -> Response:
        identifier = _table(request)
        if request.method == "HEAD":
            exists = await run_in_threadpool(store.table_exists, identifier)
            if not exists:
                raise errors.NoSuchTableError(f"Table does not exist: {'.'.join(identifier)}")
            return Response(status_code=204)
        table = await run_in_threadpool(store.load_table, identifier)
        return _table_response(table)

    async def commit_table(request: Request) -> Response:
        identifier = _table(request)
        # The spec makes "identifier" optional here (the path names the table); pyiceberg requires it.
        default_id = {"identifier": {"namespace": list(identifier[:-1]), "name": identifier[-1]}}
        body = await parse_body(request, CommitTableRequest, default_id)
        result: CommitTableResponse = await run_in_threadpool(
            store.commit_table, identifier, body.requirements, body.updates
        )
        return model_response(result)

    async def drop_table(request: Request) -> Response:
        await run_in_threadpool(store.drop_table, _table(request))
        return Response(status_code=204)

    ns = "/v1/{prefix}/namespaces/{namespace}"
    return [
        Route("/v1/config", guarded(get_config), methods=["GET"]),
        Route("/v1/{prefix}/namespaces", guarded(list_namespaces), methods=["GET"]),
        Route("/v1/{prefix}/namespaces", guarded(create_namespace), methods=["POST"]),
        Route(ns, guarded(load_namespace), methods=["GET", "HEAD"]),
        Route(ns, guarded(drop_namespace), methods=["DELETE"]),
        Route(f"{ns}/properties", guarded(update_namespace), methods=["POST"]),
        Route(f"{ns}/tables", guarded(list_tables), methods=["GET"]),
        Route(f"{ns}/tables", guarded(create_table), methods=["POST"]),
        Route(f"{ns}/tables/{{table}}", guarded(load_table), methods=["GET", "HEAD"]),
        Route(f"{ns}/tables/{{table}}", guarded(commit_table), methods=["POST"]),
        Route(f"{ns}/tables/{{table}}", guarded(drop_table), methods=["DELETE"]),
    ]


def _namespace(raw: str) -> Identifier:
    parts = tuple(raw.split(NAMESPACE_SEPARATOR))
    if any(not part for part in parts):
        raise errors.BadRequestError(f"invalid namespace {raw!r}")
    return parts


def _table(request: Request) -> Identifier:
    return (*_namespace(request.path_params["namespace"]), request.path_params["table"])


def _table_response(table: Table) -> Response:
    return model_response(TableResponse(metadata_location=table.metadata_location, metadata=table.metadata, config={}))
