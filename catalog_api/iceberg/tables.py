"""Table routes: list, create (and stage), load (cached serialized bodies, ETags, gzip, vended
credentials), register, commit, drop and purge, unregister, rename, metrics reports, credentials."""

from __future__ import annotations

import gzip
import hashlib
import json

from pydantic import BaseModel, Field
from pyiceberg.catalog.rest import CreateTableRequest, RegisterTableRequest, TableResponse
from pyiceberg.table import CommitTableRequest, CommitTableResponse
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Identifier
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from catalog_api.auth.access import Privilege, principal_of
from catalog_api.auth.credentials import CredentialVendor, wants_vending, with_credentials
from catalog_api.iceberg.routing import (
    RouteBuilder,
    in_commit_thread,
    namespace_param,
    paginate,
    rename_pair,
    table_param,
)
from catalog_api.responses import model_response, parse_body
from catalog_api.store.catalog import check_name
from catalog_api.store.metadata_files import MetadataCache
from lakeview import errors


class ReportMetricsRequest(BaseModel):
    report_type: str = Field(alias="report-type")


def add_table_routes(builder: RouteBuilder) -> None:
    """Register the table endpoints on ``builder`` (and so in ``/v1/config`` ``endpoints``)."""
    store = builder.store
    responses = MetadataCache(size=1024)  # serialized load-table bodies, keyed by metadata location
    vendor = CredentialVendor.from_properties(dict(store._catalog.properties)) if store.remote else None

    async def list_tables(request: Request) -> Response:
        namespace = namespace_param(request)
        tables = await run_in_threadpool(store.list_tables, namespace)
        page, token = paginate(request, [{"namespace": list(t[:-1]), "name": t[-1]} for t in tables])
        return JSONResponse({"identifiers": page, **({"next-page-token": token} if token else {})})

    async def create_table(request: Request) -> Response:
        namespace = namespace_param(request)
        body = await parse_body(
            request, CreateTableRequest, {"location": None, "partition-spec": None, "write-order": None}
        )
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
            plain = table_json(location, store.files.table_json(location, metadata), config=True)
            body = with_credentials(plain, credential)
            return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})
        return table_response(request, location, metadata, mode)

    def table_response(request: Request, location: str, metadata: TableMetadata, mode: str) -> Response:
        key = (mode, location)
        bodies = responses.get(key)
        if bodies is None:  # serialize once per metadata file (immutable); gzip once for clients that take it
            if mode == "refs":
                referenced = {ref.snapshot_id for ref in metadata.refs.values()}
                metadata = metadata.model_copy(
                    update={"snapshots": [s for s in metadata.snapshots if s.snapshot_id in referenced]}
                )
                plain = (
                    TableResponse(metadata_location=location, metadata=metadata, config={}).model_dump_json().encode()
                )
            else:
                plain = table_json(location, store.files.table_json(location, metadata), config=True)
            bodies = (etag_of(mode, location), plain, gzip.compress(plain, compresslevel=5))
            responses.put(key, bodies)
        etag, plain, packed = bodies
        headers = request.headers
        if "if-none-match" in headers and etag in [tag.strip() for tag in headers["if-none-match"].split(",")]:
            return Response(status_code=304, headers={"ETag": etag})
        if "gzip" in headers.get("accept-encoding", ""):
            headers = {"ETag": etag, "Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
            return Response(packed, media_type="application/json", headers=headers)
        return Response(plain, media_type="application/json", headers={"ETag": etag, "Vary": "Accept-Encoding"})

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
        result: CommitTableResponse = await in_commit_thread(
            store.commit_table, identifier, body.requirements, body.updates
        )
        body_json = table_json(
            result.metadata_location, store.files.table_json(result.metadata_location, result.metadata)
        )
        return Response(
            body_json, media_type="application/json", headers={"ETag": etag_of("all", result.metadata_location)}
        )

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

    ns = "/v1/{prefix}/namespaces/{namespace}"
    table = f"{ns}/tables/{{table}}"
    builder.add("GET", table, load_table, Privilege.READ)  # first: the hot path matches on the first try
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
