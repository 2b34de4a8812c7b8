"""Prometheus metrics: ``GET /metrics`` and catalog request latency by route.

Per-view numbers (lag, SLO compliance, commits, rows in/out, quarantined rows) are computed
at scrape time from the catalog store and the runtime heartbeats, the same way
``lakeview status`` does, so every catalog replica reports the same values whether or not
it runs the views. Commit latency is measured where commits happen (the process running the
views) and is exported by that process's own ``/metrics``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from catalog_api.ops.status import view_statuses

if TYPE_CHECKING:
    from lakeview.config.models import ProjectConfig

CATALOG_REQUEST_SECONDS = Histogram(
    "lakeview_catalog_request_seconds",
    "Catalog HTTP request latency by route template (e.g. /iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}).",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
COMMIT_SECONDS = Histogram(
    "lakeview_commit_seconds",
    "Time to commit one epoch of a view (merge, data files, catalog commit).",
    ["view"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
DEGRADED_REASONS = (
    "BACKFILLING",
    "RECOVERING",
    "FALLING_BEHIND",
    "SOURCE_ERROR",
    "COMMIT_RETRYING",
    "REGISTRAR_DOWN",
    "STOPPED",
    "FAILED",
)


class RequestLatencyMiddleware:
    """Observes each request's latency under its route *template*, so labels stay bounded."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def observe_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observe_status)
        finally:
            CATALOG_REQUEST_SECONDS.labels(scope["method"], route_label(scope), str(status[0])).observe(
                time.perf_counter() - start
            )


def route_label(scope: Scope) -> str:
    """The matched route's template with its mount prefix; "unmatched" for 404s."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if path is None or isinstance(route, type(None)):
        return "unmatched"
    return f"{scope.get('root_path', '')}{path}" or "/"


class ViewCollector:
    """Per-view gauges and counters, read at scrape time (see module docstring)."""

    def __init__(self, project: ProjectConfig, store: Any) -> None:
        self.project = project
        self.store = store

    def collect(self):
        lag = GaugeMetricFamily(
            "lakeview_view_lag_seconds",
            "Freshness lag: now minus the arrival of the newest input the view reflects.",
            labels=["view"],
        )
        target = GaugeMetricFamily(
            "lakeview_view_target_lag_seconds", "The view's freshness SLO (target_lag).", labels=["view"]
        )
        slo = GaugeMetricFamily(
            "lakeview_view_slo_compliance", "Fraction of the last hour with lag <= target_lag.", labels=["view"]
        )
        degraded = GaugeMetricFamily(
            "lakeview_view_degraded", "1 for the reason the view is below its SLO.", labels=["view", "reason"]
        )
        running = GaugeMetricFamily(
            "lakeview_view_running", "1 when a live process maintains the view.", labels=["view"]
        )
        pending = GaugeMetricFamily(
            "lakeview_view_pending_files", "Landed files the view has not taken in yet.", labels=["view"]
        )
        achieved = GaugeMetricFamily(
            "lakeview_view_cadence_achieved_seconds", "Median time between commits in the last hour.", labels=["view"]
        )
        commits = CounterMetricFamily(
            "lakeview_view_commits", "Commits in the table's retained snapshot history.", labels=["view"]
        )
        rows_in = CounterMetricFamily(
            "lakeview_view_rows_in", "Source rows read, over the retained history.", labels=["view"]
        )
        rows_out = CounterMetricFamily(
            "lakeview_view_rows_out", "View rows written, over the retained history.", labels=["view"]
        )
        quarantined = CounterMetricFamily(
            "lakeview_view_rows_quarantined", "Malformed source rows set aside.", labels=["view"]
        )
        state = GaugeMetricFamily(
            "lakeview_view_state",
            "1 for the view's state (FAILED: parked after an error), 0 for the others.",
            labels=["view", "state"],
        )
        failed_epoch = GaugeMetricFamily(
            "lakeview_view_failed_epoch", "The epoch a FAILED view stopped at.", labels=["view"]
        )
        for s in view_statuses(self.project, self.store):
            labels = [s.view]
            for name in VIEW_STATES:
                state.add_metric([s.view, name], 1.0 if view_state(s.state) == name else 0.0)
            if s.failed_epoch is not None:
                failed_epoch.add_metric(labels, s.failed_epoch)
            if s.freshness_lag_ms is not None:
                lag.add_metric(labels, s.freshness_lag_ms / 1000)
            if s.target_lag_ms is not None:
                target.add_metric(labels, s.target_lag_ms / 1000)
            if s.slo_compliance is not None:
                slo.add_metric(labels, s.slo_compliance)
            for reason in DEGRADED_REASONS:
                degraded.add_metric([s.view, reason], 1.0 if s.degraded_reason == reason else 0.0)
            running.add_metric(labels, 1.0 if s.running else 0.0)
            if s.pending_files is not None:
                pending.add_metric(labels, s.pending_files)
            if s.cadence_achieved_ms is not None:
                achieved.add_metric(labels, s.cadence_achieved_ms / 1000)
            commits.add_metric(labels, s.commits)
            rows_in.add_metric(labels, s.rows_in_total)
            rows_out.add_metric(labels, s.rows_out_total)
            quarantined.add_metric(labels, s.rows_quarantined)
        yield from (
            lag,
            target,
            slo,
            degraded,
            running,
            pending,
            achieved,
            commits,
            rows_in,
            rows_out,
            quarantined,
            state,
            failed_epoch,
        )


VIEW_STATES = ("NOT_CREATED", "CREATED", "COMMITTED", "FAILED")


def view_state(status_state: str) -> str:
    """The bounded label of a status ``state`` (its text may carry a hint such as "(run `lakeview up`)")."""
    if status_state == "FAILED":
        return "FAILED"
    if status_state.startswith("not created"):
        return "NOT_CREATED"
    return "COMMITTED" if status_state == "committed" else "CREATED"


def metrics_route(project: ProjectConfig | None, store: Any) -> Route:
    """``GET /metrics``: process metrics (request and commit latency) plus per-view metrics."""
    views = CollectorRegistry(auto_describe=False)
    if project is not None:
        views.register(ViewCollector(project, store))

    def render() -> bytes:
        return generate_latest(REGISTRY) + generate_latest(views)

    async def metrics(request: Request) -> Response:
        return Response(await run_in_threadpool(render), media_type=CONTENT_TYPE_LATEST)

    return Route("/metrics", metrics, methods=["GET"])


def timed(view: str, commit: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a writer's ``commit`` so each call is observed in ``lakeview_commit_seconds``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with COMMIT_SECONDS.labels(view).time():
            return commit(*args, **kwargs)

    return wrapper
