"""Iceberg REST catalog routes for config, namespaces, tables and transactions under ``/iceberg/v1``.

Request and response bodies are pyiceberg's own pydantic models; the commit logic is the
store's (pyiceberg's). Blocking store calls run in Starlette's thread pool. Views live in
``view_routes.py``; both build their routes through :class:`RouteBuilder`, which maps every
error to the spec's shape and checks the caller's privilege on the namespaces involved.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field
from pyiceberg.catalog.rest import (
    ConfigResponse,
    CreateTableRequest,
    NamespaceResponse,
    RegisterTableRequest,
    TableResponse,
    UpdateNamespacePropertiesResponse,
)
from pyiceberg.table import CommitTableRequest, CommitTableResponse
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Identifier
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from catalog_api.access import Privilege, authorize, can_see, is_warehouse_admin, principal_of
from catalog_api.credentials import CredentialVendor, wants_vending, with_credentials
from catalog_api.responses import from_exception, model_response, parse_body
from catalog_api.store import CatalogStore, MetadataCache, TableChange, check_name
from lakeview import errors

NAMESPACE_SEPARATOR = "\x1f"
IDEMPOTENCY_LIFETIME = "PT30M"
MAX_PAGE_SIZE = 1000

Handler = Callable[[Request], Awaitable[Response]]


class CreateNamespaceRequest(BaseModel):
    namespace: list[str]
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespaceRequest(BaseModel):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


class TableIdentifierBody(BaseModel):
    namespace: list[str]
    name: str


class RenameRequest(BaseModel):
    source: TableIdentifierBody
    destination: TableIdentifierBody


class CommitTransactionRequest(BaseModel):
    table_changes: list[dict[str, Any]] = Field(alias="table-changes")


class ReportMetricsRequest(BaseModel):
    report_type: str = Field(alias="report-type")


class RouteBuilder:
    """Collects routes and the ``endpoints`` list that ``/v1/config`` advertises."""

    def __init__(self, store: CatalogStore) -> None:
        self.store = store
        self.routes: list[Route] = []
        self.endpoints: list[str] = []

    def add(self, method: str, path: str, fn: Handler, privilege: Privilege | None) -> None:
        """Serve ``fn`` for ``method path``; ``privilege`` on the path's namespace (None: any caller)."""
        store = self.store

        async def endpoint(request: Request) -> Response:
            try:
                prefix = request.path_params.get("prefix")
                if prefix is not None and prefix != store.name:
                    raise errors.NotFoundError(f"unknown warehouse prefix {prefix!r}; this catalog serves {store.name!r}")
                if privilege is not None and "namespace" in request.path_params:
                    authorize(request, namespace_param(request), privilege)
                return await fn(request)
            except Exception as exc:  # one mapping for every error, see responses.py
                return from_exception(exc)

        self.routes.append(Route(path, endpoint, methods=[method]))  # Starlette serves HEAD for GET
        if path.startswith("/v1/") and path != "/v1/config":
            self.endpoints.append(f"{method} {path}")


def build_routes(store: CatalogStore, extra: Callable[[RouteBuilder], None] | None = None) -> list[Route]:
    """The catalog's routes, relative to the ``/iceberg`` mount; ``extra`` adds more (views)."""
    builder = RouteBuilder(store)
    responses = MetadataCache(size=1024)  # serialized load-table bodies, keyed by metadata location
    vendor = CredentialVendor.from_properties(dict(store._catalog.properties)) if store.remote else None

    async def get_config(request: Request) -> Response:
        warehouse = request.query_params.get("warehouse")
        if warehouse and warehouse not in (store.name, store.warehouse):
            raise errors.NotFoundError(f"unknown warehouse {warehouse!r}; this catalog serves {store.name!r}")
        data = ConfigResponse(defaults={}, overrides={"prefix": store.name}).model_dump(exclude_none=True)
        data["endpoints"] = builder.endpoints
        data["idempotency-key-lifetime"] = IDEMPOTENCY_LIFETIME
        return JSONResponse(data)

    # ------------------------------------------------------------ namespaces
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
        summary = await run_in_threadpool(store.update_namespace, namespace_param(request), set(body.removals), body.updates)
        return model_response(UpdateNamespacePropertiesResponse(**summary))

    # ------------------------------------------------------------ tables
    async def list_tables(request: Request) -> Response:
        namespace = namespace_param(request)
        tables = await run_in_threadpool(store.list_tables, namespace)
        page, token = paginate(request, [{"namespace": list(t[:-1]), "name": t[-1]} for t in tables])
        return JSONResponse({"identifiers": page, **({"next-page-token": token} if token else {})})

    async def create_table(request: Request) -> Response:
        namespace = namespace_param(request)
        body = await parse_body(request, CreateTableRequest, {"location": None, "partition-spec": None, "write-order": None})
        location, metadata = await run_in_threadpool(
            store.create_table,
            (*namespace, check_name("table", body.name)),
            body.table_schema,
            body.location,
            body.partition_spec,
            body.write_order,
            body.properties,
            body.stage_create,
        )
        if body.stage_create:
            return model_response(TableResponse(metadata_location=None, metadata=metadata, config={}))
        return table_response(request, location, metadata, "all")

    async def load_table(request: Request) -> Response:
        identifier = table_param(request)
        if request.method == "HEAD":
            if not await run_in_threadpool(store.table_exists, identifier):
                raise errors.NoSuchTableError(f"Table does not exist: {'.'.join(identifier)}")
            return Response(status_code=204)
        mode = request.query_params.get("snapshots", "all")
        if mode not in ("all", "refs"):
            raise errors.BadRequestError(f"snapshots must be 'all' or 'refs', not {mode!r}")
        # A pointer read on SQLite (~50 µs) or PostgreSQL is cheaper than a thread hop and the GIL handoff;
        # a metadata file not in the cache (maybe on S3) is read in the thread pool.
        loaded = store.load_cached_metadata(identifier) if store.inline_reads else None
        if loaded is None:
            loaded = await run_in_threadpool(store.load_metadata, identifier)
        location, metadata = loaded
        if vendor is not None and wants_vending(request.headers):
            credential = await run_in_threadpool(vendor.vend, metadata.location, may_write(request, identifier[:-1]))
            plain = table_json(location, store.metadata_json(location, metadata), config=True)
            body = with_credentials(plain, credential)
            return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})
        return table_response(request, location, metadata, mode)

    def table_response(request: Request, location: str, metadata: TableMetadata, mode: str) -> Response:
        etag = etag_of(mode, location)
        if etag in [tag.strip() for tag in request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers={"ETag": etag})
        key = f"{mode}:{location}"
        bodies = responses.get(key)
        if bodies is None:  # serialize once per metadata file (immutable); gzip once for clients that take it
            if mode == "refs":
                referenced = {ref.snapshot_id for ref in metadata.refs.values()}
                metadata = metadata.model_copy(update={"snapshots": [s for s in metadata.snapshots if s.snapshot_id in referenced]})
            if mode == "refs":
                plain = TableResponse(metadata_location=location, metadata=metadata, config={}).model_dump_json().encode()
            else:
                plain = table_json(location, store.metadata_json(location, metadata), config=True)
            bodies = (plain, gzip.compress(plain, compresslevel=5))
            responses.put(key, bodies)
        if "gzip" in request.headers.get("accept-encoding", ""):
            headers = {"ETag": etag, "Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
            return Response(bodies[1], media_type="application/json", headers=headers)
        return Response(bodies[0], media_type="application/json", headers={"ETag": etag, "Vary": "Accept-Encoding"})

    async def register_table(request: Request) -> Response:
        namespace = namespace_param(request)
        body = await parse_body(request, RegisterTableRequest, {"overwrite": False})
        location, metadata = await run_in_threadpool(
            store.register_table, (*namespace, body.name), body.metadata_location, body.overwrite
        )
        return table_response(request, location, metadata, "all")

    async def commit_table(request: Request) -> Response:
        identifier = table_param(request)
        # The spec makes "identifier" optional here (the path names the table); pyiceberg requires it.
        default_id = {"identifier": {"namespace": list(identifier[:-1]), "name": identifier[-1]}}
        body = await parse_body(request, CommitTableRequest, default_id)
        result: CommitTableResponse = await run_in_threadpool(store.commit_table, identifier, body.requirements, body.updates)
        body_json = table_json(result.metadata_location, store.metadata_json(result.metadata_location, result.metadata))
        return Response(body_json, media_type="application/json", headers={"ETag": etag_of("all", result.metadata_location)})

    async def drop_table(request: Request) -> Response:
        purge = request.query_params.get("purgeRequested", "false").lower()
        if purge not in ("true", "false"):
            raise errors.BadRequestError(f"purgeRequested must be true or false, not {purge!r}")
        await run_in_threadpool(store.drop_table, table_param(request), purge == "true")
        return Response(status_code=204)

    async def unregister_table(request: Request) -> Response:
        identifier = table_param(request)
        location, metadata = await run_in_threadpool(store.load_metadata, identifier)
        await run_in_threadpool(store.drop_table, identifier, False)
        return model_response(TableResponse(metadata_location=location, metadata=metadata, config={}))

    async def rename_table(request: Request) -> Response:
        source, target = await rename_pair(request)
        await run_in_threadpool(store.rename_table, source, target)
        return Response(status_code=204)

    async def report_metrics(request: Request) -> Response:
        identifier = table_param(request)
        await parse_body(request, ReportMetricsRequest)
        if not await run_in_threadpool(store.table_exists, identifier):
            raise errors.NoSuchTableError(f"Table does not exist: {'.'.join(identifier)}")
        return Response(status_code=204)

    async def load_credentials(request: Request) -> Response:
        identifier = table_param(request)
        _, metadata = await run_in_threadpool(store.load_metadata, identifier)
        if vendor is None:  # a local warehouse (or vending off) needs no storage credentials
            return JSONResponse({"storage-credentials": []})
        credential = await run_in_threadpool(vendor.vend, metadata.location, may_write(request, identifier[:-1]))
        return JSONResponse({"storage-credentials": [credential]}, headers={"Cache-Control": "no-store"})

    async def commit_transaction(request: Request) -> Response:
        body = await parse_body(request, CommitTransactionRequest)
        changes = []
        for raw in body.table_changes:
            if not isinstance(raw, dict) or "identifier" not in raw:
                raise errors.BadRequestError("every table-changes entry needs an identifier")
            try:
                change = CommitTableRequest.model_validate(raw)
            except Exception as exc:
                raise errors.BadRequestError(f"invalid table change: {exc}") from None
            identifier = (*change.identifier.namespace.root, change.identifier.name)
            authorize(request, identifier[:-1], Privilege.WRITE)
            changes.append(TableChange(identifier, change.requirements, change.updates))
        await run_in_threadpool(store.commit_transaction, changes)
        return Response(status_code=204)

    ns = "/v1/{prefix}/namespaces/{namespace}"
    table = f"{ns}/tables/{{table}}"
    builder.add("GET", table, load_table, Privilege.READ)  # first: the hot path matches on the first try
    builder.routes.append(Route("/v1/config", builder_endpoint(builder, get_config), methods=["GET"]))
    builder.add("GET", "/v1/{prefix}/namespaces", list_namespaces, None)
    builder.add("POST", "/v1/{prefix}/namespaces", create_namespace, None)
    builder.add("GET", ns, load_namespace, Privilege.READ)
    builder.endpoints.append(f"HEAD {ns}")
    builder.add("DELETE", ns, drop_namespace, Privilege.ADMIN)
    builder.add("POST", f"{ns}/properties", update_namespace, Privilege.ADMIN)
    builder.add("GET", f"{ns}/tables", list_tables, Privilege.READ)
    builder.add("POST", f"{ns}/tables", create_table, Privilege.WRITE)
    builder.endpoints.append(f"HEAD {table}")
    builder.add("POST", table, commit_table, Privilege.WRITE)
    builder.add("DELETE", table, drop_table, Privilege.WRITE)
    builder.add("POST", f"{ns}/register", register_table, Privilege.WRITE)
    builder.add("POST", f"{table}/unregister", unregister_table, Privilege.WRITE)
    builder.add("GET", f"{table}/credentials", load_credentials, Privilege.READ)
    builder.add("POST", f"{table}/metrics", report_metrics, Privilege.READ)
    builder.add("POST", "/v1/{prefix}/tables/rename", rename_table, None)
    builder.add("POST", "/v1/{prefix}/transactions/commit", commit_transaction, None)
    if extra is not None:
        extra(builder)
    return builder.routes


async def rename_pair(request: Request) -> tuple[Identifier, Identifier]:
    """Source and destination of a rename (tables and views alike), after checking WRITE on both namespaces."""
    body = await parse_body(request, RenameRequest)
    source = (*body.source.namespace, body.source.name)
    target = (*body.destination.namespace, body.destination.name)
    authorize(request, source[:-1], Privilege.WRITE)
    authorize(request, target[:-1], Privilege.WRITE)
    return source, target


def may_write(request: Request, namespace: Identifier) -> bool:
    """Whether vended credentials may write: the caller holds write on the namespace (always without auth)."""
    principal = principal_of(request)
    if principal is None:
        return True
    held = principal.privilege_on(namespace)
    return held is not None and held >= Privilege.WRITE


def etag_of(mode: str, location: str) -> str:
    """A strong ETag per metadata file and snapshot mode (metadata files are immutable)."""
    return '"' + hashlib.sha256(f"{mode}:{location}".encode()).hexdigest()[:32] + '"'


def table_json(location: str, metadata_json: bytes, config: bool = False) -> bytes:
    """A LoadTableResult / CommitTableResponse body around already-serialized metadata."""
    tail = b',"config":{}}' if config else b"}"
    return b'{"metadata-location":' + json.dumps(location).encode() + b',"metadata":' + metadata_json + tail


def builder_endpoint(builder: RouteBuilder, fn: Handler) -> Handler:
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)
        except Exception as exc:
            return from_exception(exc)

    return endpoint


def parse_namespace(raw: str) -> Identifier:
    """A namespace path parameter: levels joined by the unit separator (0x1F)."""
    parts = tuple(raw.split(NAMESPACE_SEPARATOR))
    for part in parts:
        check_name("namespace", part)
    return parts


def namespace_param(request: Request) -> Identifier:
    return parse_namespace(request.path_params["namespace"])


def table_param(request: Request) -> Identifier:
    return (*namespace_param(request), check_name("table", request.path_params["table"]))


def paginate(request: Request, items: list[Any]) -> tuple[list[Any], str | None]:
    """Page a sorted list with ``pageToken`` (opaque: the last item returned) and ``pageSize``.

    Without ``pageSize`` everything is returned (clients that do not page get all names).
    """
    size_raw = request.query_params.get("pageSize")
    token = request.query_params.get("pageToken")
    if size_raw is None and not token:
        return items, None
    try:
        size = int(size_raw) if size_raw is not None else MAX_PAGE_SIZE
    except ValueError:
        raise errors.BadRequestError(f"pageSize must be a positive integer, not {size_raw!r}") from None
    if size < 1:
        raise errors.BadRequestError(f"pageSize must be a positive integer, not {size_raw!r}")
    size = min(size, MAX_PAGE_SIZE)
    start = 0
    if token:
        try:
            after = json.loads(bytes.fromhex(token))
        except ValueError:
            raise errors.BadRequestError(f"pageToken {token!r} is not a token this catalog issued") from None
        if not _issued_shape(after):
            raise errors.BadRequestError(f"pageToken {token!r} is not a token this catalog issued")
        try:
            start = next((i for i, item in enumerate(items) if _sort_key(item) > _sort_key(after)), len(items))
        except TypeError:  # a token decoding to a value of another shape was not issued here
            raise errors.BadRequestError(f"pageToken {token!r} is not a token this catalog issued") from None
    page = items[start : start + size]
    more = start + size < len(items)
    return page, (json.dumps(page[-1]).encode().hex() if more and page else None)


def _issued_shape(after: Any) -> bool:
    """A page token decodes to a namespace (list of names) or a table identifier, as :func:`paginate` issues."""
    if isinstance(after, list):
        return all(isinstance(level, str) for level in after)
    return (
        isinstance(after, dict)
        and set(after) == {"namespace", "name"}
        and isinstance(after["name"], str)
        and isinstance(after["namespace"], list)
        and _issued_shape(after["namespace"])
    )


def _sort_key(item: Any) -> Any:
    if isinstance(item, dict):
        return (item.get("namespace", []), item.get("name", ""))
    return item
