"""`lakeview up` as a process: it keeps the view fresh and Ctrl-C stops catalog and Spark cleanly."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from catalog_api.server import free_port
from lakeview.cli.generator import land_json, make_orders
from tests.waiting import wait_for

CLI = [sys.executable, "-m", "lakeview.cli"]


def test_up_commits_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    subprocess.run(
        [*CLI, "init", str(tmp_path), "--port", str(port), "--cadence", "1s"], check=True, capture_output=True
    )
    process = subprocess.Popen(
        [*CLI, "up", "-p", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        uri = f"http://127.0.0.1:{port}/iceberg"

        def catalog_up() -> bool:
            try:
                return httpx.get(f"{uri}/v1/config", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(catalog_up, 120, "the catalog")
        orders = make_orders(30, seed=5)
        land_json(tmp_path / "landing" / "orders", "a.json", orders)

        def committed() -> bool:  # the catalog's status route: polling `lakeview status` would start a process a look
            [view] = httpx.get(f"http://127.0.0.1:{port}/lakeview/v1/views", timeout=10).json()["views"]
            return view["state"] == "committed"

        wait_for(committed, 120, "the first snapshot")
        out = subprocess.run([*CLI, "status", "--json", "-p", str(tmp_path)], capture_output=True, text=True)
        [view] = json.loads(out.stdout)
        assert view["state"] == "committed" and view["epoch"] == 0 and view["snapshot_id"] is not None, view

        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert "stopped." in output and "Traceback" not in output
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "the catalog port is released"
    query = subprocess.run(
        [*CLI, "query", "SELECT SUM(orders) FROM lake.analytics.sales_by_product", "-p", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert query.returncode == 0 and "30" in query.stdout
