"""``POST /v1/{prefix}/transactions/commit``: several tables' changes committed atomically (WRITE on each)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from pyiceberg.table import CommitTableRequest
from starlette.requests import Request
from starlette.responses import Response

from catalog_api.auth.access import Privilege, authorize
from catalog_api.iceberg.routing import RouteBuilder, in_commit_thread
from catalog_api.responses import parse_body
from catalog_api.store.catalog import TableChange
from lakeview import errors


class CommitTransactionRequest(BaseModel):
    table_changes: list[dict[str, Any]] = Field(alias="table-changes")


def add_transaction_routes(builder: RouteBuilder) -> None:
    """Register the multi-table commit endpoint on ``builder``."""
    store = builder.store

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
        await in_commit_thread(store.commit_transaction, changes)
        return Response(status_code=204)

    builder.add("POST", "/v1/{prefix}/transactions/commit", commit_transaction, None)
