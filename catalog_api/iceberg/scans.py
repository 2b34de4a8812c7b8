"""Iceberg REST scan planning routes: ``POST …/plan``, ``GET/DELETE …/plan/{plan-id}``, ``POST …/tasks``.

Planning runs synchronously, so a plan is ``completed`` in the first answer; a scan over more
than ``manifests_per_task`` data manifests answers plan-task tokens that ``…/tasks`` expands
(pagination). Plan ids are stateless (see ``scan_planning.py``): ``DELETE`` has nothing to cancel.
"""

from __future__ import annotations

import json
from typing import Any

from pyiceberg.catalog.rest.scan_planning import (
    FetchScanTasksRequest,
    PlanTableScanRequest,
)
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from catalog_api.auth.access import Privilege
from catalog_api.iceberg.routing import RouteBuilder, table_param
from catalog_api.responses import parse_body
from catalog_api.store.scan_planning import ScanPlanner, ScanSpec, decode, spec_of
from lakeview import errors

MANIFESTS_PER_TASK = 16


def add_scan_routes(builder: RouteBuilder, manifests_per_task: int = MANIFESTS_PER_TASK) -> None:
    """Register the scan planning endpoints on ``builder`` (and so in ``/v1/config`` ``endpoints``)."""
    store = builder.store

    def planner(request: Request) -> ScanPlanner:
        return ScanPlanner(store.load_table(table_param(request)), manifests_per_task)

    def completed(request: Request, spec: ScanSpec) -> dict[str, Any]:
        return {**planner(request).plan(spec), "plan-id": spec.encode()}

    async def plan_scan(request: Request) -> Response:
        try:
            body = await parse_body(request, PlanTableScanRequest)
        except TypeError as exc:  # pyiceberg's expression parser on an unknown expression type
            raise errors.BadRequestError(f"invalid filter: {exc}") from None
        raw = json.loads(await request.body())
        spec = spec_of(body, raw)
        return JSONResponse(await run_in_threadpool(completed, request, spec))

    async def fetch_plan(request: Request) -> Response:
        spec, manifests = decode(request.path_params["plan_id"], errors.NoSuchPlanIdError)
        if manifests is not None:
            raise errors.NoSuchPlanIdError("a plan-task token is not a plan id")
        return JSONResponse(await run_in_threadpool(completed, request, spec))

    async def cancel_plan(request: Request) -> Response:
        _, manifests = decode(request.path_params["plan_id"], errors.NoSuchPlanIdError)
        if manifests is not None:
            raise errors.NoSuchPlanIdError("a plan-task token is not a plan id")
        if not await run_in_threadpool(store.table_exists, table_param(request)):
            raise errors.NoSuchTableError(f"Table does not exist: {'.'.join(table_param(request))}")
        return Response(status_code=204)  # planning is synchronous and holds nothing to release

    async def fetch_tasks(request: Request) -> Response:
        body = await parse_body(request, FetchScanTasksRequest)
        spec, manifests = decode(body.plan_task, errors.NoSuchPlanTaskError)
        if manifests is None:
            raise errors.NoSuchPlanTaskError("a plan id is not a plan-task token")
        result = await run_in_threadpool(lambda: planner(request).tasks(spec, manifests))
        return JSONResponse(result)

    table = "/v1/{prefix}/namespaces/{namespace}/tables/{table}"
    builder.add("POST", f"{table}/plan", plan_scan, Privilege.READ)
    for method, fn in (("GET", fetch_plan), ("DELETE", cancel_plan)):
        builder.add(method, f"{table}/plan/{{plan_id}}", fn, Privilege.READ)
        builder.endpoints[-1] = f"{method} {table}/plan/{{plan-id}}"  # the spec's name for the parameter
    builder.add("POST", f"{table}/tasks", fetch_tasks, Privilege.READ)
