"""``lakeview demo`` / ``make demo``: a bounded run of the embedded stack.

Creates a demo project, starts the catalog and the view's streaming query, lands order files
over several cadence ticks and, after each snapshot, prints the view as DuckDB sees it through
the REST catalog, checked against the sums of the generated orders.
"""

from __future__ import annotations

import queue
import shutil
import time
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from catalog_api.server import free_port
from lakeview.cli.generator import land_json, make_orders
from lakeview.cli.scaffold import init_project
from lakeview.errors import LakeviewError
from lakeview.ivm.commits import CommitRecord
from lakeview.project import load_project
from lakeview.sql.duck import attach_sql, connect_catalog
from lakeview.stack.embedded import EmbeddedStack

MARKER = ".lakeview-demo"
VIEW = "sales_by_product"


def run_demo(
    directory: Path, *, batches: int = 4, orders: int = 250, cadence: str = "5s", console: Console | None = None
) -> bool:
    """Run the demo; True when every snapshot matched the generated orders."""
    console = console or Console()
    started = time.monotonic()
    _fresh_directory(directory)
    config_file = init_project(directory, port=free_port("127.0.0.1"), cadence=cadence)
    (directory / MARKER).write_text("created by `lakeview demo`; safe to delete\n")
    project = load_project(config_file)
    console.print(f"[bold]Lakeview demo[/] in {directory} (cadence {cadence}, {batches} batches of {orders} orders)")

    commits: queue.Queue[CommitRecord] = queue.Queue()
    expected: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    all_ok = True
    with EmbeddedStack(project) as stack:
        console.print(f"catalog: {stack.catalog_uri}  (SQLite store {project.catalog_store_url})")
        console.print("starting Spark and the streaming query ...")
        stack.start_views(on_commit=commits.put)
        con = connect_catalog(stack.catalog_uri, project.lake.name)
        landing = project.source_path("orders")
        for batch in range(1, batches + 1):
            rows = make_orders(orders, seed=batch, first_id=(batch - 1) * orders + 1)
            land_json(landing, f"orders-{batch:03d}.json", rows)
            for row in rows:
                expected[row["product_id"]][0] += row["quantity"]
                expected[row["product_id"]][1] += 1
            console.print(f"\nlanded batch {batch}: {orders} orders -> {landing.name}/orders-{batch:03d}.json")
            try:
                record = commits.get(timeout=120)
            except queue.Empty:
                raise LakeviewError("no snapshot was committed within 120 s; see the log above") from None
            view = con.sql(
                f"SELECT product_id, total_sold, orders FROM lake.analytics.{VIEW} ORDER BY product_id"
            ).fetchall()
            ok = {p: [t, n] for p, t, n in view} == dict(expected)
            all_ok &= ok
            console.print(_render(view))
            console.print(
                f"snapshot {record.snapshot_id} (epoch {record.epoch}, +{record.rows_inserted}/-{record.rows_deleted} "
                f"rows, lag {record.lag_ms} ms): {'matches' if ok else 'DOES NOT match'} the generated orders",
                soft_wrap=True,
                highlight=False,
            )
        stack.stop_views()
    elapsed = time.monotonic() - started
    console.print(
        f"\n[bold]{'All snapshots matched' if all_ok else 'MISMATCH'}[/] the generated orders ({elapsed:.0f} s)."
    )
    _print_next_steps(console, directory, project.lake.name, project.server.port)
    return all_ok


def _fresh_directory(directory: Path) -> None:
    if directory.exists() and any(directory.iterdir()):
        if not (directory / MARKER).exists():
            raise LakeviewError(f"{directory} exists and was not made by `lakeview demo`; choose another --dir")
        shutil.rmtree(directory)


def _render(rows: list[tuple]) -> Table:
    table = Table(title=f"DuckDB: lake.analytics.{VIEW}")
    for column in ("product_id", "total_sold", "orders"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*(str(v) for v in row))
    return table


def _print_next_steps(console: Console, directory: Path, warehouse: str, port: int) -> None:
    uri = f"http://127.0.0.1:{port}/iceberg"
    console.print(
        f"""
The lake is on disk in {directory / "lake"}; nothing is left running.

Run the same project continuously (first: source .venv/bin/activate):
  cd {directory} && lakeview up            # catalog on {uri} + the streaming view
  python generate_orders.py 100            # in another shell: land more orders
  lakeview status                          # last snapshot, epoch, lag per view
  lakeview query "SELECT * FROM lake.analytics.{VIEW} ORDER BY total_sold DESC"

Connect while `lakeview up` (or `lakeview serve`) runs:
  DuckDB:    LOAD avro; LOAD httpfs; LOAD iceberg;
             {attach_sql(uri, warehouse)};
             SELECT * FROM lake.analytics.{VIEW};
  pyiceberg: RestCatalog("lakeview", uri="{uri}", warehouse="{warehouse}").load_table("analytics.{VIEW}").scan().to_arrow()
  Spark:     --conf spark.sql.catalog.lakeview=org.apache.iceberg.spark.SparkCatalog
             --conf spark.sql.catalog.lakeview.type=rest
             --conf spark.sql.catalog.lakeview.uri={uri}
             --conf spark.sql.catalog.lakeview.warehouse={warehouse}
             SELECT * FROM lakeview.analytics.{VIEW}""",
        soft_wrap=True,
        highlight=False,
    )
