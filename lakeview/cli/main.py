"""The ``lakeview`` command. Heavy modules (Spark, pyiceberg, DuckDB) are imported inside
commands so ``lakeview --help`` stays fast."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from lakeview.cli.discovery import add_commands as add_discovery_commands
from lakeview.errors import LakeviewError

app = typer.Typer(
    help="Lakeview keeps SQL views over the lake fresh incrementally and serves them through an Iceberg REST catalog.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ProjectOption = Annotated[
    Path, typer.Option("--project", "-p", help="Project directory or lakeview.toml file.", show_default=True)
]


def _load(project: Path):
    from lakeview.project import load_project  # lazy: the command line imports a command's modules only when it runs

    return load_project(project)


def _quiet_logs(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("pyiceberg", "httpx", "py4j", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="Where to create the project.")] = Path("."),
    port: Annotated[int, typer.Option(help="Catalog port written to the config.")] = 8181,
    cadence: Annotated[str, typer.Option(help="Cadence of the example view.")] = "5s",
    force: Annotated[bool, typer.Option(help="Overwrite an existing lakeview.toml.")] = False,
) -> None:
    """Write an example project: lakeview.toml, a landing directory and generate_orders.py."""
    from lakeview.cli.scaffold import (
        init_project,  # lazy: the command line imports a command's modules only when it runs
    )
    from lakeview.config.cadence import (
        parse_cadence,  # lazy: the command line imports a command's modules only when it runs
    )

    try:
        parse_cadence(cadence)
    except ValueError as exc:
        raise LakeviewError(f"--cadence: {exc}") from None
    path = init_project(directory, port=port, cadence=cadence, force=force)
    typer.echo(f"wrote {path}\nnext: cd {directory} && lakeview up   (and `python generate_orders.py` to land orders)")


@app.command()
def up(
    project: ProjectOption = Path("."),
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
    spark_master: Annotated[
        str | None,
        typer.Option(
            "--spark-master",
            help="Run view jobs on this Spark cluster (spark://HOST:PORT, k8s://URL); overrides the master in lakeview.toml.",
        ),
    ] = None,
    catalog_uri: Annotated[
        str | None,
        typer.Option(
            "--catalog-uri",
            help="Commit through a catalog already running there (e.g. http://catalog:8181/iceberg) instead of starting one.",
        ),
    ] = None,
    views: Annotated[list[str] | None, typer.Option("--view", help="Maintain only this view (repeatable).")] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=0,
            max=65535,
            help="Also serve this process's Prometheus metrics (commit latency) on this port; for view jobs without a catalog (--catalog-uri).",
        ),
    ] = None,
    metrics_host: Annotated[str, typer.Option("--metrics-host", help="Bind address for --metrics-port.")] = "127.0.0.1",
) -> None:
    """Start the catalog service and every view's streaming job; Ctrl-C stops both cleanly."""
    from lakeview.stack.embedded import EmbeddedStack  # lazy: uvicorn loads only where a server starts

    _quiet_logs(verbose)
    config = _load(project)
    if spark_master is not None:
        from lakeview.config.models import (
            SparkConfig,  # lazy: the command line imports a command's modules only when it runs
        )

        try:
            spark = SparkConfig(master=spark_master, conf=config.spark.conf)
        except ValueError as exc:
            raise LakeviewError(f"--spark-master: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None  # type: ignore[attr-defined]
        config = config.model_copy(update={"spark": spark})
    unknown = [v for v in views or [] if v not in config.views]
    if unknown:
        raise LakeviewError(f"--view: no view {unknown[0]!r}; views: {', '.join(config.views) or 'none'}")

    from lakeview.ops.progress import (
        BackfillProgress,  # lazy: the command line imports a command's modules only when it runs
    )

    backfill: BackfillProgress | None = None

    def report(record) -> None:
        if backfill is not None:
            backfill.mark_committed(record.view)
        typer.echo(
            f"{record.view}: snapshot {record.snapshot_id} epoch {record.epoch} "
            f"+{record.rows_inserted}/-{record.rows_deleted} rows, lag {record.lag_ms} ms"
        )

    if metrics_port is not None:
        from prometheus_client import (
            start_http_server,  # lazy: the command line imports a command's modules only when it runs
        )

        start_http_server(metrics_port, addr=metrics_host)
        typer.echo(f"metrics: http://{metrics_host}:{metrics_port}/metrics")

    def on_park(parked) -> None:
        typer.echo(
            f"error: view {parked.view} FAILED at epoch {parked.failed_epoch}: {parked.error} "
            f"(the other views go on; `lakeview resume {parked.view}` restarts it)",
            err=True,
        )

    stack = EmbeddedStack(config, catalog_uri=catalog_uri)
    failed: list[str] = []
    try:
        stack.start_catalog()
        typer.echo(f"catalog: {stack.catalog_uri} (warehouse {config.lake.name!r})")
        if catalog_uri is None:
            typer.echo(f"console: {console_url(config)}  (`lakeview ui` opens it)")
        stack.start_views(views or None, on_commit=report, isolate=True, on_park=on_park)
        backfill = BackfillProgress(stack, _new_views_with_history(stack)).start()
        typer.echo(f"spark: {stack.spark.sparkContext.master if stack.spark else '-'}")
        stop = _stop_event()  # after Spark started: pyspark installs its own SIGINT handler
        typer.echo(f"maintaining {len(stack.queries)} view(s): {', '.join(stack.queries) or 'none'}; Ctrl-C to stop")
        # Wait in Python, not in a py4j call: a signal then interrupts cleanly. A failed view is
        # parked by the stack's supervisor; only when every view is parked is there nothing to run.
        while not stop.wait(1.0):
            if stack.halted:
                failed = sorted(stack.parked)
                break
        if failed:
            typer.echo(
                f"error: every view FAILED ({', '.join(failed)}); nothing can run. Fix the cause and restart "
                "`lakeview up` (it resumes each view from its last committed epoch)",
                err=True,
            )
        else:
            typer.echo("stopping ...")
    except KeyboardInterrupt:  # Ctrl-C while starting up
        typer.echo("\nstopping ...")
    finally:
        if backfill is not None:
            backfill.stop()
        stack.stop()
        if stack.spark is not None:
            stack.spark.stop()
    if failed:
        raise typer.Exit(1)
    typer.echo("stopped.")


def _new_views_with_history(stack) -> list[str]:
    """Views starting their first batch over files that already landed (a backfill)."""
    from lakeview.ops.runtime import (
        count_pending_files,  # lazy: the command line imports a command's modules only when it runs
    )

    found = []
    for name, pipeline in stack.pipelines.items():
        pending, _ = count_pending_files(stack.project, pipeline.source, stack.project.checkpoint_path(name))
        if pending and pipeline.writer.last_commit() is None:
            found.append(name)
    return found


@app.command()
def serve(project: ProjectOption = Path(".")) -> None:
    """Run only the Iceberg REST catalog (no view jobs) until Ctrl-C."""
    from catalog_api.server import CatalogServer  # lazy: uvicorn loads only where a server starts
    from catalog_api.store.catalog import (
        open_store,  # lazy: the command line imports a command's modules only when it runs
    )

    _quiet_logs()
    config = _load(project)
    from catalog_api.auth.authenticator import (
        project_authenticator,  # lazy: the command line imports a command's modules only when it runs
    )
    from catalog_api.ops.routes import (
        lakeview_app_options,  # lazy: the command line imports a command's modules only when it runs
    )

    store = open_store(config)
    server = CatalogServer(
        store,
        host=config.server.host,
        port=config.server.port,
        authenticator=project_authenticator(config),
        **lakeview_app_options(config, store),
    )
    from lakeview.stack.history_sampler import (
        HistorySampler,  # lazy: the command line imports a command's modules only when it runs
    )

    history = HistorySampler(config, store).start()  # the console's lag and backlog history
    typer.echo(
        f"catalog: {server.uri} (warehouse {config.lake.name!r}); console: {console_url(config)}; Ctrl-C to stop"
    )
    try:
        server.serve_forever()
    finally:
        history.stop()


def console_url(config) -> str:
    """Where the running process serves the console."""
    return config.catalog_uri.removesuffix("/iceberg") + "/ui/"


@app.command()
def ui(
    project: ProjectOption = Path("."),
    browser: Annotated[
        bool, typer.Option("--browser/--no-browser", help="Open the console in a web browser when one is available.")
    ] = True,
) -> None:
    """Print the console's URL (served by `lakeview up` / `serve`) and open it in a browser when there is one."""
    import os  # lazy: the command line imports a command's modules only when it runs
    import webbrowser  # lazy: the command line imports a command's modules only when it runs

    import httpx  # lazy: the command line imports a command's modules only when it runs

    config = _load(project)
    url = console_url(config)
    typer.echo(f"console: {url}")
    try:
        running = httpx.get(url.removesuffix("/ui/") + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        running = False
    if not running:
        typer.echo("nothing answers there yet: start `lakeview up` (or `lakeview serve`) for this project")
    # Only where a graphical browser can exist: a text browser would take over this terminal.
    graphical = sys.platform in ("darwin", "win32") or any(
        os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")
    )
    if browser and running and graphical:
        try:
            opened = webbrowser.open(url)
        except webbrowser.Error:
            opened = False
        typer.echo("opened in a browser" if opened else "no browser could be opened; open the URL above")


@app.command()
def resume(
    view: Annotated[str, typer.Argument(help="The FAILED view to restart.")],
    project: ProjectOption = Path("."),
    wait: Annotated[
        float, typer.Option(min=0, help="Seconds to wait for the running `lakeview up` to restart it.")
    ] = 30.0,
) -> None:
    """Restart a FAILED (parked) view from its last committed epoch, exactly once.

    The request goes through the runtime directory (<warehouse>/_lakeview/runtime/VIEW.resume), which
    the running `lakeview up` checks every second; with none running, the next `lakeview up` resumes
    every parked view anyway. Exits 1 if the view fails again or is not picked up within --wait.
    """
    import time  # lazy: the command line imports a command's modules only when it runs

    from lakeview.ops.parking import (  # lazy: the command line imports a command's modules only when it runs
        parked,
        request_resume,
    )

    config = _load(project)
    if view not in config.views:
        raise LakeviewError(f"no view {view!r}; views: {', '.join(config.views) or 'none'}")
    before = parked(config, view)
    if before is None:
        raise LakeviewError(f"view {view!r} is not FAILED; nothing to resume")
    request_resume(config, view)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        now = parked(config, view)
        if now is None:
            typer.echo(f"{view}: resumed from its last committed epoch (it failed at epoch {before.failed_epoch})")
            return
        if now.failed_at_ms != before.failed_at_ms:
            typer.echo(f"error: {view} FAILED again at epoch {now.failed_epoch}: {now.error}", err=True)
            raise typer.Exit(1)
        time.sleep(0.5)
    typer.echo(
        f"{view}: resume requested; no running `lakeview up` picked it up within {wait:g} s "
        "(the next `lakeview up` resumes it)",
        err=True,
    )
    raise typer.Exit(1)


@app.command()
def status(
    project: ProjectOption = Path("."),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh the table in place until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between refreshes with --watch.")] = 2.0,
) -> None:
    """Per view: freshness lag, SLO compliance and why it is degraded, last snapshot, epoch, cadence."""
    from catalog_api.ops.status import (  # lazy: the command line imports a command's modules only when it runs
        status_table,
        view_statuses,
    )

    config = _load(project)
    if as_json:
        typer.echo(json.dumps([s.as_dict() for s in view_statuses(config)], indent=2))
        return
    from rich.console import Console  # lazy: the command line imports a command's modules only when it runs

    if not watch:
        Console().print(status_table(view_statuses(config)))
        return
    import time  # lazy: the command line imports a command's modules only when it runs

    from rich.live import Live  # lazy: the command line imports a command's modules only when it runs

    from catalog_api.store.catalog import (
        open_store,  # lazy: the command line imports a command's modules only when it runs
    )

    store = open_store(config)
    with Live(status_table(view_statuses(config, store)), auto_refresh=False) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(status_table(view_statuses(config, store)), refresh=True)
        except KeyboardInterrupt:
            pass


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="SQL for DuckDB; views are lake.<namespace>.<view>.")],
    project: ProjectOption = Path("."),
    engine: Annotated[str, typer.Option(help="duckdb, or trino (needs --server).")] = "duckdb",
    server: Annotated[
        str | None, typer.Option(help="Trino server URL for --engine trino, e.g. http://HOST:8080.")
    ] = None,
    catalog: Annotated[
        str, typer.Option(help="Trino catalog for --engine trino (see `lakeview trino-config`).")
    ] = "lakeview",
) -> None:
    """Run SQL in DuckDB with the Lakeview catalog attached over REST as `lake`.

    Uses the running catalog (`lakeview up`/`serve`); when none answers, a temporary one is
    started on a free loopback port for this query. With ``--engine trino`` the SQL runs on the
    Trino server at ``--server`` instead (views are <catalog>.<namespace>.<view>).
    """
    if engine not in ("duckdb", "trino"):
        raise LakeviewError(f"--engine {engine!r}: use duckdb or trino")
    if engine == "trino":
        from lakeview.cli.trino import run_query  # lazy: the command line imports a command's modules only when it runs

        if not server:
            raise LakeviewError(
                "--engine trino needs --server http://HOST:PORT (a Trino with the `lakeview trino-config` catalogs)"
            )
        _print_result(*run_query(sql, server, catalog=catalog))
        return
    from lakeview.sql.duck import (
        connect_catalog,  # lazy: the command line imports a command's modules only when it runs
    )
    from lakeview.stack.embedded import catalog_for  # lazy: uvicorn loads only where a server starts

    config = _load(project)
    with catalog_for(config) as catalog_uri:
        con = connect_catalog(catalog_uri, config.lake.name)
        try:
            result = con.sql(sql)
        except Exception as exc:  # DuckDB's own errors name the problem
            raise LakeviewError(f"query failed: {exc}") from None
        if result is None:
            return
        _print_result(result.columns, result.fetchall())


def _print_result(columns: list[str], rows: list[tuple]) -> None:
    from rich.console import Console  # lazy: the command line imports a command's modules only when it runs
    from rich.table import Table  # lazy: the command line imports a command's modules only when it runs

    table = Table(caption=f"{len(rows)} row(s)")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("NULL" if v is None else str(v) for v in row))
    Console().print(table)


@app.command()
def refresh(
    view: Annotated[str, typer.Argument(help="The view to bring up to date.")],
    project: ProjectOption = Path("."),
) -> None:
    """Process everything landed so far for VIEW (one snapshot), then stop. For manual cadences.
    A grouped view is refreshed with its whole group (one transaction for all members)."""
    from lakeview.stack.embedded import EmbeddedStack  # lazy: uvicorn loads only where a server starts

    _quiet_logs()
    config = _load(project)
    config.require_view(view)
    with EmbeddedStack(config, port=0) as stack:
        stack.start_views([view], available_now=True)
        stack.queries[view].awaitTermination()
        if stack.spark is not None:
            stack.spark.stop()
    group = config.views[view].group
    members = [name for name, v in config.views.items() if group is not None and v.group == group]
    typer.echo(f"{view}: refreshed" + (f" with its group {group} ({', '.join(members)})" if group is not None else ""))


@app.command()
def explain(
    view: Annotated[str, typer.Argument(help="The view to explain.")],
    project: ProjectOption = Path("."),
) -> None:
    """Print VIEW's incremental plan: operators, how each is maintained, its key and the state kept."""
    from lakeview.project import explain_view  # lazy: the command line imports a command's modules only when it runs

    config = _load(project)
    config.require_view(view)
    typer.echo(explain_view(config, view))


@app.command()
def verify(
    view: Annotated[str, typer.Argument(help="The view to check.")],
    project: ProjectOption = Path("."),
) -> None:
    """Recompute VIEW from its sources at the committed frontier (DuckDB) and compare with the snapshot."""
    from catalog_api.ops import (
        view_tables as tables,  # lazy: the command line imports a command's modules only when it runs
    )
    from lakeview.ivm import oracle  # lazy: the command line imports a command's modules only when it runs

    config = _load(project)
    config.require_view(view)
    record = tables.last_commit(config, view)
    if record is None:
        raise LakeviewError(f"{view} has no commit yet; nothing to verify")
    from lakeview.sql.dag import upstream_of  # lazy: the command line imports a command's modules only when it runs

    if upstream_of(config, view) is not None:  # a view over views: recompute through the chain from the sources
        from lakeview.stack.chain_oracle import (
            expected_rows,  # lazy: the command line imports a command's modules only when it runs
        )

        expected, how = expected_rows(config, view, record)
        comparison = oracle.compare(tables.read_rows(config, view, record.snapshot_id), expected)
        typer.echo(f"{view} at epoch {record.epoch} (recomputed: {how}): {comparison.describe()}")
        if not comparison.equal:
            raise typer.Exit(1)
        return
    files = oracle.frontier_files(config, view, record.frontier)  # per source (joins and unions read several)
    from lakeview.ops.progress import (
        work_progress,  # lazy: the command line imports a command's modules only when it runs
    )

    # Three steps, each over all files or rows at once (the recompute is one DuckDB query).
    with work_progress(
        f"verify {view}: read snapshot, recompute {sum(map(len, files.values()))} files, compare", total=3, unit="steps"
    ) as progress:
        stored = tables.read_rows(config, view, record.snapshot_id)
        progress.advance()
        expected = oracle.recompute(config, view, files)
        progress.advance()
        comparison = oracle.compare(stored, expected)
        progress.advance()
    typer.echo(f"{view} at epoch {record.epoch} ({sum(map(len, files.values()))} files): {comparison.describe()}")
    if not comparison.equal:
        raise typer.Exit(1)


@app.command()
def maintain(
    view: Annotated[str, typer.Argument(help="The view whose table to maintain.")],
    project: ProjectOption = Path("."),
) -> None:
    """Run VIEW's table maintenance now: expire snapshots past retention, compact small files, remove orphans."""
    from lakeview.stack.embedded import catalog_for  # lazy: uvicorn loads only where a server starts
    from lakeview.stack.maintenance import (
        maintain_view,  # lazy: the command line imports a command's modules only when it runs
    )

    _quiet_logs()
    config = _load(project)
    config.require_view(view)
    with catalog_for(config) as catalog_uri:
        report = maintain_view(config, view, catalog_uri, lambda m: typer.echo(f"{view}: {m}"))
    typer.echo(f"{view}: done: {report.describe()}")


@app.command()
def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to create the demo project.")] = Path("demo-project"),
    batches: Annotated[int, typer.Option(min=1, help="Order files to land, one per cadence tick.")] = 4,
    orders: Annotated[int, typer.Option(min=1, help="Orders per file.")] = 250,
    cadence: Annotated[str, typer.Option(help="The view's cadence.")] = "5s",
) -> None:
    """A bounded run (about a minute): land orders over several ticks, print the view from DuckDB after each snapshot."""
    from lakeview.cli.demo import run_demo  # lazy: uvicorn loads only where a server starts

    _quiet_logs()
    if not run_demo(directory.resolve(), batches=batches, orders=orders, cadence=cadence):
        raise typer.Exit(1)


add_discovery_commands(app)  # register, unregister, prune, trino-config


def _stop_event() -> threading.Event:
    """An event set by Ctrl-C (SIGINT) or SIGTERM."""
    stop = threading.Event()

    def handler(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def main(argv: list[str] | None = None) -> None:
    try:
        # Without standalone mode click returns a typer.Exit's code instead of exiting with it.
        code = app(args=argv, standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except LakeviewError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:  # click usage errors
        import click  # lazy: the command line imports a command's modules only when it runs

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise


if __name__ == "__main__":
    main()
