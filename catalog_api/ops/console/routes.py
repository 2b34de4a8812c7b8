"""The console's routes: the static page at ``/ui/`` and its JSON under ``/lakeview/v1``:

- ``GET /lakeview/v1/lineage``: sources → views → where each view is published, views with their state;
- ``GET /lakeview/v1/views/{name}/history?window=1h|1d``: lag against target over time, epochs and rows
  per minute, SLO compliance, and the degraded or failed reason with its error;
- ``GET /lakeview/v1/views/{name}/snapshots``: the snapshot history with the SQL reading each snapshot
  (snapshot ids as strings: they pass 2**53, where a browser's numbers lose digits);
- ``GET /lakeview/v1/views/{name}/plan``: the view's ``explain``, as text and as its operator graph;
- ``GET /lakeview/v1/sources``: per source its backlog over time and its quarantined rows.

Statuses come from :mod:`catalog_api.ops.status`, the history from :mod:`lakeview.history` (written by
the process serving the catalog), plans from :func:`lakeview.project.explain_view`. With auth on, a view needs
``read`` on its namespace (views the caller may not read are left out of the lists); the page and
its assets are public (they hold no data) and send the bearer token the user gives them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from catalog_api.auth.access import Privilege, authorize
from catalog_api.ops.console.plan_graph import plan_graph
from catalog_api.ops.console.snapshot_sql import TableRef, snapshot_sql
from catalog_api.ops.status import view_status, view_statuses
from catalog_api.ops.view_tables import commit_history
from catalog_api.registrars.service import RegistrationState, with_registrar_reasons
from catalog_api.responses import from_exception
from lakeview import errors
from lakeview.ops.history import ConsoleHistory, console_state, history_path
from lakeview.ops.runtime import read_runtime
from lakeview.sql.planner import view_plan

if TYPE_CHECKING:
    from lakeview.config.models import ProjectConfig

STATIC = Path(__file__).parent / "static"
WINDOWS_MS = {"1h": 3_600_000, "1d": 86_400_000}
CHART_POINTS = 720  # lag samples per chart at most (the newest sample of each slice kept, its peak lag)
REGISTRAR_LABELS = {"glue": "AWS Glue", "hive": "Hive Metastore", "filesystem": "paths (filesystem)"}


def console_public_paths() -> frozenset[str]:
    """The page and its assets, reachable without a token (the token is typed into the page)."""
    assets = {f"/ui/{p.relative_to(STATIC).as_posix()}" for p in STATIC.rglob("*") if p.is_file()}
    return frozenset({"/ui", "/ui/", *assets})


def console_static_routes() -> list[BaseRoute]:
    """``/ui/`` (index.html) and its assets, shipped in the package (nothing fetched at run time)."""

    async def to_slash(request: Request) -> Response:
        return RedirectResponse("/ui/")

    return [Route("/ui", to_slash), Mount("/ui", StaticFiles(directory=STATIC, html=True), name="console")]


def _readable(request: Request, namespace: str) -> bool:
    try:
        authorize(request, (namespace,), Privilege.READ)
    except errors.CatalogError:
        return False
    return True


def _inputs(project: ProjectConfig, view: str) -> list[str]:
    try:
        return list(view_plan(project, view).sources)
    except errors.LakeviewError:
        return []


def view_card(project: ProjectConfig, status: dict[str, Any]) -> dict[str, Any]:
    """A status as the console shows it: its console state, and the error of a failed query
    (the status's own ``error`` when it has one, else the running process's heartbeat)."""

    card = dict(status)
    if not card.get("error"):
        runtime = read_runtime(project, card["view"])
        if runtime is not None and runtime.failed:
            card["error"] = runtime.failed
    card["console_state"] = console_state(card)
    card["namespace"] = project.views[card["view"]].namespace
    return card


def lineage(
    project: ProjectConfig, cards: list[dict[str, Any]], published: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Nodes (sources, views, publish targets) and edges of the project, for the visible ``cards``."""
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    visible = {c["view"]: c for c in cards}
    used_sources: set[str] = set()
    targets: dict[str, dict[str, Any]] = {}
    for name, card in visible.items():
        config = project.views[name]
        nodes.append(
            {
                "id": f"view:{name}",
                "kind": "view",
                "label": name,
                "state": card["console_state"],
                "status": card.get("state"),
                "inline": not config.materialize,
                **{
                    k: card.get(k)
                    for k in (
                        "namespace",
                        "format",
                        "cadence",
                        "freshness_lag_ms",
                        "target_lag_ms",
                        "degraded_reason",
                        "error",
                        "slo_compliance",
                        "epoch",
                    )
                },
            }
        )
        for source in _inputs(project, name):
            if source in project.views:
                if source in visible:
                    edges.append({"from": f"view:{source}", "to": f"view:{name}"})
                continue
            used_sources.add(source)
            edges.append({"from": f"source:{source}", "to": f"view:{name}"})
        places = ["rest"] if config.format.value == "iceberg" or not config.materialize else []
        places += [r.value for r in config.registrars]
        for place in places:
            targets.setdefault(
                place,
                {
                    "id": f"target:{place}",
                    "kind": "target",
                    "registrar": place,
                    "label": REGISTRAR_LABELS.get(place, f"REST catalog ({project.lake.name})"),
                },
            )
            entry = published.get(name, {}).get(place, {})
            done = place == "rest" or entry.get("registered")
            state = "failing" if entry.get("reason") else "ok" if done else "pending"
            edges.append(
                {
                    "from": f"view:{name}",
                    "to": f"target:{place}",
                    "state": state,
                    "error": entry.get("error"),
                    "location": entry.get("location"),
                }
            )
    for source in sorted(used_sources):
        config = project.sources.get(source)
        detail = f"{config.format.value} · {config.path}" if config is not None else ""
        nodes.append({"id": f"source:{source}", "kind": "source", "label": source, "detail": detail})
    nodes += list(targets.values())
    return {"nodes": nodes, "edges": edges}


def _thin(samples: list[Any], window_ms: int) -> list[list[Any]]:
    """At most CHART_POINTS ``[at_ms, lag_ms, state]`` points: the peak lag of each slice of the window."""
    slice_ms = max(1, window_ms // CHART_POINTS)
    out: dict[int, list[Any]] = {}
    for s in samples:
        key = s.at_ms // slice_ms
        if key not in out or (s.lag_ms or 0) >= (out[key][1] or 0):
            out[key] = [s.at_ms, s.lag_ms, s.state]
    return [out[k] for k in sorted(out)]


def console_api_routes(project: ProjectConfig, store: Any) -> list[Route]:
    """The console's JSON routes, to mount under ``/lakeview/v1`` next to lakeview_routes'."""

    history = ConsoleHistory(history_path(project.warehouse_path), project.console.retention_ms)

    def view_of(request: Request) -> str:
        name = request.path_params["name"]
        if name not in project.views:
            raise errors.NotFoundError(f"no view {name!r}; views: {', '.join(project.views) or 'none'}")
        authorize(request, (project.views[name].namespace,), Privilege.READ)
        return name

    def card_of(name: str) -> dict[str, Any]:
        return view_card(project, with_registrar_reasons(project, [view_status(project, store, name)])[0].as_dict())

    async def get_lineage(request: Request) -> Response:
        def build() -> dict[str, Any]:
            statuses = [s.as_dict() for s in view_statuses(project, store)]
            cards = [view_card(project, s) for s in statuses if _readable(request, project.views[s["view"]].namespace)]
            graph = lineage(project, cards, RegistrationState(project).load())
            return {**graph, "views": cards, "auth": project.auth.enabled, "at_ms": int(time.time() * 1000)}

        return JSONResponse(await run_in_threadpool(build))

    async def get_history(request: Request) -> Response:
        try:
            name = view_of(request)
            window = request.query_params.get("window", "1h")
            if window not in WINDOWS_MS:
                raise errors.BadRequestError(f"window {window!r}: use one of {', '.join(WINDOWS_MS)}")
        except errors.LakeviewError as exc:
            return from_exception(exc)

        def build() -> dict[str, Any]:
            now = int(time.time() * 1000)
            since = now - WINDOWS_MS[window]
            samples = history.view_samples(name, since)
            measured = [s for s in samples if s.lag_ms is not None and s.target_lag_ms is not None]
            met = sum(1 for s in measured if s.lag_ms <= s.target_lag_ms)
            return {
                "view": name,
                "window": window,
                "from_ms": since,
                "to_ms": now,
                "status": card_of(name),
                "lag": _thin(samples, WINDOWS_MS[window]),
                "sampled_compliance": round(met / len(measured), 6) if measured else None,
                "per_minute": history.commit_rates(name, since),
            }

        return JSONResponse(await run_in_threadpool(build))

    async def get_snapshots(request: Request) -> Response:
        try:
            name = view_of(request)
        except errors.LakeviewError as exc:
            return from_exception(exc)
        base = str(request.base_url).rstrip("/")

        def build() -> dict[str, Any]:
            config = project.views[name]
            ref = TableRef(
                config.namespace,
                name,
                config.format.value,
                f"{base}/iceberg",
                project.lake.name,
                project.table_location(name),
                auth=project.auth.enabled,
                delta_catalog="lakeview_glue_delta"
                if any(r.value == "glue" for r in config.registrars)
                else "lakeview_hive_delta",
            )
            try:
                records = commit_history(project, name, limit=50) if config.materialize else []
            except errors.NoSuchTableError:
                records = []
            return {
                "view": name,
                "format": config.format.value,
                "snapshots": [
                    {
                        "snapshot_id": None if r.snapshot_id is None else str(r.snapshot_id),
                        "epoch": r.epoch,
                        "frontier": r.frontier,
                        "rows_in": r.rows_in,
                        "rows_inserted": r.rows_inserted,
                        "rows_deleted": r.rows_deleted,
                        "committed_at_ms": r.committed_at_ms,
                        "lag_ms": r.lag_ms,
                        "sql": snapshot_sql(ref, r.snapshot_id) if r.snapshot_id is not None else None,
                    }
                    for r in records
                ],
            }

        return JSONResponse(await run_in_threadpool(build))

    async def get_plan(request: Request) -> Response:
        try:
            name = view_of(request)
            if not project.views[name].materialize:
                return JSONResponse(
                    {
                        "view": name,
                        "text": f"{name} is an inline view: {project.views[name].sql}",
                        "graph": plan_graph("", _inputs(project, name), name),
                    }
                )
            from lakeview.project import explain_view

            text = await run_in_threadpool(explain_view, project, name)
        except errors.LakeviewError as exc:
            return from_exception(exc)
        table = f"{project.views[name].namespace}.{name}"
        return JSONResponse({"view": name, "text": text, "graph": plan_graph(text, _inputs(project, name), table)})

    async def get_sources(request: Request) -> Response:
        def build() -> dict[str, Any]:
            now = int(time.time() * 1000)
            readers: dict[str, list[str]] = {}
            for view in project.views:
                for source in _inputs(project, view):
                    readers.setdefault(source, []).append(view)
            out = []
            for name, config in project.sources.items():
                names = readers.get(name, [])
                if names and not any(_readable(request, project.views[v].namespace) for v in names):
                    continue
                samples = history.source_samples(name, now - WINDOWS_MS["1h"])
                reasons, sample = history.quarantine(name)
                latest = samples[-1] if samples else None
                out.append(
                    {
                        "source": name,
                        "format": config.format.value,
                        "path": config.path,
                        "readers": names,
                        "pending_files": latest.pending_files if latest else None,
                        "pending_bytes": latest.pending_bytes if latest else None,
                        "quarantined": latest.quarantined if latest else None,
                        "reasons": reasons,
                        "sample": sample,
                        "backlog": [[s.at_ms, s.pending_files, s.pending_bytes] for s in samples],
                    }
                )
            return {"sources": out}

        return JSONResponse(await run_in_threadpool(build))

    return [
        Route("/lineage", get_lineage, methods=["GET"]),
        Route("/sources", get_sources, methods=["GET"]),
        Route("/views/{name}/history", get_history, methods=["GET"]),
        Route("/views/{name}/snapshots", get_snapshots, methods=["GET"]),
        Route("/views/{name}/plan", get_plan, methods=["GET"]),
    ]
