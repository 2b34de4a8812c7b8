"""Load and validate a project file: the typed config models plus the checks that need the
SQL planner (every view planned at load, so an unsupported view fails before anything runs)."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ValidationError

from lakeview.config.auth import AuthClientConfig, AuthConfig
from lakeview.config.console import ConsoleConfig
from lakeview.config.models import (
    PROJECT_FILE,
    ChangeFeedConfig,
    GlueConfig,
    HiveConfig,
    ImagesConfig,
    LakeConfig,
    ProjectConfig,
    RegistrarName,
    ServerConfig,
    SourceConfig,
    SparkConfig,
    ViewConfig,
    _check_name,
    is_loopback,
)
from lakeview.config.schema import duckdb_columns, reserved_column
from lakeview.config.storage import MaintenanceConfig, RetentionConfig, S3Config
from lakeview.errors import ConfigError, UnsupportedSQLError
from lakeview.graph import WEIGHT as GRAPH_WEIGHT
from lakeview.graph import Graph, compile_view, step
from lakeview.graph import explain as explain_graph
from lakeview.graph.evolve import output_gains, star_evolution
from lakeview.graph.expire import bounds as watermark_bounds
from lakeview.graph.join import shared_sides
from lakeview.graph.later_sql import later_cost
from lakeview.graph.output_types import output_key, output_schema
from lakeview.graph.state import log_table_name, state_table_name
from lakeview.ivm.changefeed import source_mirror_name
from lakeview.ivm.explain_lines import graph_batch_lines, published_lines
from lakeview.sql.column_roles import check_column_roles
from lakeview.sql.dag import check_dag, upstreams_of
from lakeview.sql.dialects import check_inline_view
from lakeview.sql.duck import cursor
from lakeview.sql.graph_plan import GraphPlan, graph_plan
from lakeview.sql.graph_watermark import check_graph as check_graph_watermark
from lakeview.sql.graph_watermark import event_time as graph_event_time
from lakeview.sql.groups import check_groups, group_lines
from lakeview.sql.plan import WEIGHT, parse_statement
from lakeview.sql.planner import view_plan
from lakeview.sql.stars import evolving_stars, starred_tables


def load_project(path: str | Path = PROJECT_FILE) -> ProjectConfig:
    """Read and validate a project file. Raises :class:`ConfigError`."""
    file = Path(path)
    if file.is_dir():
        file = file / PROJECT_FILE
    if not file.exists():
        raise ConfigError(str(file), "-", "file not found; create one with `lakeview init DIR`")
    try:
        data = tomllib.loads(file.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(file), "-", f"not valid TOML: {exc}") from exc
    return parse_project(data, file=str(file), root=file.resolve().parent)


def parse_project(data: dict[str, Any], *, file: str = PROJECT_FILE, root: Path = Path(".")) -> ProjectConfig:
    """Validate an already-parsed project document (see :func:`load_project`)."""
    try:
        config = ProjectConfig.model_validate({**data, "root": root, "file": file})
    except ValidationError as exc:
        raise _config_error(file, data, exc) from None
    _check_views(config)
    _check_auth(config)
    _check_registrars(config)
    return config


def _check_auth(config: ProjectConfig) -> None:
    """Auth mode ``none`` only on loopback; oauth2 needs at least one client."""
    if not config.auth.enabled and not is_loopback(config.server.host):
        raise ConfigError(
            config.file,
            "server.host",
            f'{config.server.host!r} is not a loopback address; binding elsewhere requires [auth] mode = "oauth2" '
            "with clients; use 127.0.0.1 (or ::1, localhost) otherwise",
        )
    if config.auth.enabled and not config.auth.clients:
        raise ConfigError(config.file, "auth.clients", "mode oauth2 needs at least one [auth.clients.NAME] entry")


def _check_registrars(config: ProjectConfig) -> None:
    for name, view in config.views.items():
        if RegistrarName.HIVE in view.registrars and config.hive is None:
            raise ConfigError(
                config.file, f"views.{name}.register", "'hive' needs a [hive] table with uri = \"thrift://HOST:PORT\""
            )
        if view.registrars and not view.materialize:
            raise ConfigError(
                config.file,
                f"views.{name}.register",
                "an inline view (materialize = false) lives only in the REST catalog",
            )


def _check_views(config: ProjectConfig) -> None:
    for name, view in config.views.items():
        _check_name_at(config.file, f"views.{name}", name)
        if not view.materialize:
            check_inline_view(config, name)
            continue
        try:
            plan = view_plan(config, name)
        except UnsupportedSQLError as exc:  # a reserved output name: named by the graph's checks
            plan = graph_plan(name, view.sql, view.dialect, exc)  # re-raises exc for SQL that is not one query
        _check_graph_view(config, name, plan)
    for name in config.sources:
        _check_name_at(config.file, f"sources.{name}", name)
        if problem := reserved_column(config.sources[name].schema_):
            raise ConfigError(config.file, f"sources.{name}.schema", problem)
    check_dag(config)

    check_groups(config)


def _check_graph_view(config: ProjectConfig, name: str, plan: GraphPlan) -> None:
    """A view loads when the operator graph compiles it over its sources' schemas; otherwise the graph's
    refusal (the construct and why) is the error."""
    key = f"views.{name}.sql"
    for source in plan.sources:
        if source in config.views and source not in config.sources:
            if not config.views[source].materialize:
                raise ConfigError(
                    config.file,
                    key,
                    f"reads the inline view {source!r} (materialize = false), which keeps no changes to read; "
                    f"set materialize = true on {source!r} or read its sources",
                )
            continue  # an upstream view: its published changes are a weighted input (its columns: view_schema)
        if source not in config.sources:
            known = ", ".join(sorted(config.sources)) or "none declared"
            views = ", ".join(sorted(v for v in config.views if v != name)) or "none"
            raise ConfigError(
                config.file,
                key,
                f"reads {source!r}, which is not a declared source (declared: {known}) nor a view (views: {views}); "
                f"add a [sources.{source}] table",
            )
        source_config = config.sources[source]
        if source_config.changes is not None and source_config.images is not None:
            raise ConfigError(
                config.file,
                key,
                f"source {source!r}: declare either [changes] (an operation column) or [images] (before/after), not both",
            )
    if problem := _star_over_evolving(config, plan):
        raise ConfigError(config.file, key, problem)
    if problem := check_graph_watermark(config, name, plan.sources):
        raise ConfigError(config.file, f"views.{name}.watermark", problem)
    if problem := check_column_roles(plan, config):
        raise ConfigError(config.file, key, problem)
    try:
        graph = view_graph(config, name)
    except UnsupportedSQLError as exc:
        raise ConfigError(config.file, key, str(exc)) from None
    repeated = [n for n, times in Counter(n.lower() for n in graph.names).items() if times > 1]
    if repeated:  # a table's columns need distinct names (Iceberg and Delta match them case-insensitively)
        raise ConfigError(
            config.file,
            key,
            f"the view's columns need distinct names, but {', '.join(repr(n) for n in repeated)} names more than one; "
            "nearest supported form: ... AS another_name",
        )


def _star_over_evolving(config: ProjectConfig, plan: GraphPlan) -> str | None:
    """Why a graph view's ``*`` cannot follow its inputs' new columns (None: it names its columns, or its
    output gains them: :func:`evolving_inputs`). Refused: ``*`` over a source with ``new_columns = "evolve"``
    where an operator keeps the starred rows in state or the columns must line up
    (:func:`lakeview.graph.evolve.star_evolution`), and ``*`` over a view whose columns grow that way."""
    starred = starred_tables(parse_statement(plan.sql, plan.dialect))
    growing = sorted(t for t in starred if t not in config.sources and t in config.views and view_evolves(config, t))
    if growing:
        return (
            f"selects * over the view(s) {', '.join(repr(v) for v in growing)}, whose columns grow as their "
            'source gains columns (new_columns = "evolve"); a view over a view does not follow them; name the '
            "columns it selects (nearest supported form: SELECT v.id, v.amount ... instead of SELECT *)"
        )
    evolving = evolving_stars(config, plan)
    if not evolving:
        return None
    problem = star_evolution(plan.duckdb_sql(), source_schemas(config, plan.sources, (plan.view,)), evolving)
    if problem is None:
        return None
    return (
        f'selects * over {", ".join(repr(s) for s in evolving)}, whose new_columns = "evolve" adds the input\'s '
        f"new columns to the source, but {problem}; name the columns it selects (nearest supported form: "
        f'SELECT a.id, a.amount ... instead of SELECT *), or set new_columns = "ignore" on '
        f"{', '.join(repr(s) for s in evolving)}"
    )


def evolving_inputs(config: ProjectConfig, view: str) -> list[str]:
    """The sources with ``new_columns = "evolve"`` a graph view's ``*`` selects: the view reads them as they
    evolve, and its table gains their new columns where its ``*`` reaches its output (the load check has
    refused what cannot be maintained); empty for a view naming its columns (it reads the declared ones)."""
    return evolving_stars(config, view_plan(config, view))


def view_evolves(config: ProjectConfig, view: str) -> bool:
    """Whether ``view``'s columns grow with a source's new columns: its ``*`` selects an evolving source's
    columns through to its output."""
    plan = view_plan(config, view)
    evolving = evolving_stars(config, plan)
    schemas = source_schemas(config, plan.sources, (view,)) if evolving else {}
    return bool(evolving) and output_gains(plan.duckdb_sql(), schemas, evolving)


def is_graph_view(config: ProjectConfig, view: str) -> bool:
    """Whether ``view`` runs through the operator graph: every materialized view does (an inline view is only
    published in the REST catalog)."""
    return config.views[view].materialize


def source_schemas(
    config: ProjectConfig, sources: tuple[str, ...] | list[str], _reading: tuple[str, ...] = ()
) -> dict[str, pa.Schema]:
    """The arrow schema of each relation a graph view reads, as the graph's inputs have it: a declared
    source's columns (its DDL; an upstream view's change files declared as a source keep their rows' weight
    in a column of their own, not an input column), or a materialized view's output columns
    (:func:`view_schema`). Raises ConfigError for views that read each other in a cycle."""
    schemas = {}
    con = cursor()
    try:
        for source in sources:
            if source not in config.sources:
                schemas[source] = view_schema(config, source, _reading)
                continue
            columns = duckdb_columns(config.sources[source].schema_)
            select = ", ".join(f'CAST(NULL AS {t}) AS "{n}"' for n, t in columns.items() if n != WEIGHT)
            schemas[source] = con.execute(f"SELECT {select} LIMIT 0").to_arrow_table().schema
    finally:
        con.close()
    return schemas


def view_schema(config: ProjectConfig, view: str, _reading: tuple[str, ...] = ()) -> pa.Schema:
    """A materialized view's output columns as an arrow schema, without Spark: from its graph over what it
    reads."""
    if view in _reading:
        cycle = [*_reading[_reading.index(view) :], view]
        raise ConfigError(
            config.file,
            f"views.{view}.sql",
            f"views read each other in a cycle: {' -> '.join(cycle)}; a view may "
            "read only views that do not read it back (directly or through other views)",
        )
    plan = view_plan(config, view)
    inputs = source_schemas(config, plan.sources, (*_reading, view))
    return _output_schema(compile_view(plan.duckdb_sql(), inputs, eager=True), inputs)


def graph_output_schema(config: ProjectConfig, view: str) -> pa.Schema:
    """A graph view's output columns (its table's schema) as its graph computes them over ``config``'s sources."""
    return _output_schema(view_graph(config, view), source_schemas(config, view_plan(config, view).sources, (view,)))


def _output_schema(graph: Graph, inputs: dict[str, pa.Schema]) -> pa.Schema:
    """The view table's columns: the graph's output with Spark's types (what the one-source stack gave)."""
    return output_schema(graph, step(graph, {}).drop_columns([GRAPH_WEIGHT]).schema, inputs)


def view_graph(config: ProjectConfig, view: str, sizes: dict[str, int] | None = None) -> Graph:
    """The operator graph of a graph view, compiled over its sources' schemas (``sizes``: rows per source,
    to order its joins), its aggregates pushed below its inner joins wherever valid (eager aggregation: a
    dimension's change then costs per the groups under its key, not per fact row, so an epoch stays flat
    with history). Raises UnsupportedSQLError naming the construct the graph cannot maintain."""
    plan = view_plan(config, view)
    schemas = source_schemas(config, plan.sources, (view,))
    return compile_view(plan.duckdb_sql(), schemas, sizes, eager=True, insert_only=append_sources(config, plan.sources))


def table_key(config: ProjectConfig, view: str) -> tuple[str, ...] | None:
    """The key of a materialized view's table (its identifier columns): a final aggregate's GROUP BY columns
    (``()``: one row), or a change feed's key through the projections and filters that keep it; None for a
    multiset keyed by the whole row (a join, a union, a view over a view, a projection dropping the key)."""
    graph = view_graph(config, view)
    return output_key(graph, _feed_keys(config, graph))


def _feed_keys(config: ProjectConfig, graph: Graph) -> dict[str, tuple[str, ...]]:
    """Each change-feed input of ``graph`` with its key."""
    return {s: tuple(c.changes.key) for s in graph.schemas if (c := config.sources.get(s)) and c.changes}


def append_sources(config: ProjectConfig, sources: tuple[str, ...] | list[str]) -> frozenset[str]:
    """The sources among ``sources`` whose changes never retract a row: declared sources that are neither a
    change feed (``changes`` / ``images``) nor another view (a project's copies declare upstream views as
    sources too; their changes are Z-sets with deletes)."""
    return frozenset(
        s
        for s in sources
        if s in config.sources
        and s not in config.views
        and config.sources[s].changes is None
        and config.sources[s].images is None
    )


def _check_name_at(file: str, key: str, name: str) -> None:
    try:
        _check_name(name)
    except ValueError as exc:
        raise ConfigError(file, key, str(exc)) from None


def _config_error(file: str, data: dict[str, Any], exc: ValidationError) -> ConfigError:
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    key = ".".join(loc) or "-"
    if error["type"] == "extra_forbidden":
        parent = ".".join(loc[:-1])
        model = _model_at(loc[:-1])
        valid = ", ".join(sorted(f.alias or n for n, f in model.model_fields.items() if n not in ("root", "file")))
        where = f"in [{parent}]" if parent else "at the top level"
        return ConfigError(file, key, f"unknown key {where}; valid keys: {valid}")
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "missing":
        return ConfigError(file, key, "required key is missing")
    value = error.get("input")
    if error["type"] == "enum":
        return ConfigError(file, key, f"{value!r} is not valid; {message.lower()}")
    return ConfigError(file, key, message if repr(value) in message else f"{value!r}: {message}")


def _model_at(loc: list[str]) -> type[BaseModel]:
    """The config model that owns the keys at ``loc`` (used to list the valid keys)."""
    nested: dict[str, type[BaseModel]] = {
        "s3": S3Config,
        "retention": RetentionConfig,
        "maintenance": MaintenanceConfig,
    }
    if loc and loc[-1] in nested and len(loc) == {"lake": 2, "views": 3}.get(loc[0]):
        return nested[loc[-1]]
    if loc[:1] == ["auth"] and len(loc) == 3 and loc[1] == "clients":
        return AuthClientConfig
    models: dict[str, type[BaseModel]] = {
        "auth": AuthConfig,
        "lake": LakeConfig,
        "glue": GlueConfig,
        "hive": HiveConfig,
        "server": ServerConfig,
        "spark": SparkConfig,
        "console": ConsoleConfig,
    }
    if not loc:
        return ProjectConfig
    if loc[0] in models:
        return models[loc[0]]
    if loc[0] == "sources":
        return (
            {"changes": ChangeFeedConfig, "images": ImagesConfig}.get(loc[2], SourceConfig)
            if len(loc) == 3
            else SourceConfig
        )
    if loc[0] == "views":
        return ViewConfig
    return ProjectConfig


def explain_view(config: ProjectConfig, view: str) -> str:
    """``lakeview explain``'s text for any view (the command line and the console ask this): a materialized
    view's operator tree under a line naming its table, sources and cadence, with the table holding each
    operator's state; an inline view's one line (it keeps no state)."""
    if not is_graph_view(config, view):
        spec = config.views[view]
        published = f"{spec.namespace}.{view}: its SQL, published in the REST catalog; no state"
        return f"view {view} (inline, materialize = false) -> {published}"
    spec = config.views[view]
    graph = view_graph(config, view)
    graph.runtime.store = _Unread()  # type: ignore[assignment]  # no table is read: no row counts
    feeds = _feed_keys(config, graph)
    shared = shared_sides(graph, feeds)  # a join side that is a feed's rows by key: kept once, in its mirror
    log = f"{spec.namespace}.{log_table_name(view)}"
    tables = []
    for t in graph.state_tables():
        if t.name in shared:
            tables.append(f"  {t.name} -> {spec.namespace}.{source_mirror_name(view, shared[t.name][0])} (the mirror)")
        elif spec.format.value == "iceberg":  # one log table for every other state (writers.graph_log)
            tables.append(f"  {t.name} -> {log} (its rows with __lv_op = '{t.name}')")
        else:
            tables.append(f"  {t.name} -> {spec.namespace}.{state_table_name(view, t)}")
    mirrored = {source for source, _ in shared.values()}
    tables += [  # every change feed's current row per key (its Z-set's retractions come from it)
        f"  {source} (the change feed's current row per key {', '.join(key)}) -> "
        f"{spec.namespace}.{source_mirror_name(view, source)} (the mirror)"
        for source, key in feeds.items()
        if source not in mirrored
    ]
    retracting = {s for s in graph.schemas if s in config.views or ((c := config.sources.get(s)) and c.images)}
    later = later_cost(graph, retracting | set(feeds), set(feeds))
    key = output_key(graph, feeds)
    keyed = f"keyed by {', '.join(key)}" if key else "one row" if key == () else "a multiset keyed by the whole row"
    head = [
        f"view {view} (operator graph) -> {spec.namespace}.{view}, cadence {spec.cadence}, format {spec.format.value}",
        f"sources: {', '.join(graph.schemas)}; the view's table is {keyed}",
        *(f"reads the view {u}: its changes published in _lakeview/changes/{u}/" for u in upstreams_of(config, view)),
        "one epoch commits the view, its state tables and change-feed mirrors in one catalog transaction (Iceberg)",
        *graph_batch_lines(config, later, bool(spec.watermark)),
        *group_lines(config, view),
        *_watermark_lines(config, view, graph),
        *published_lines(config, view),
    ]
    return "\n".join([*head, explain_graph(graph), "state tables:", *tables])


def _watermark_lines(config: ProjectConfig, view: str, graph: Graph) -> list[str]:
    """A graph view's watermark: the source whose late rows it sets aside, and the state it bounds."""
    spec = config.views[view]
    if spec.watermark is None:
        return []
    found = graph_event_time(config, view, tuple(graph.schemas))
    tables = [b.table for held in watermark_bounds(graph, found.source, found.column).values() for b in held]
    bounded = ", ".join(tables) if tables else "none (another input reaches every state)"
    return [
        f"watermark {spec.watermark} on {found.source}.{found.column}: its late rows quarantined; "
        f"state dropped once its windows close: {bounded}"
    ]


class _Unread:
    """A state store explain can name tables from without reading them."""
