"""The console's history store, its [console] config, and `lakeview ui` / `serve` serving the console."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from catalog_api.server import free_port
from lakeview.errors import ConfigError
from lakeview.ops.history import ConsoleHistory, SourceSample, ViewSample
from lakeview.project import parse_project
from tests.waiting import wait_for

LAKEVIEW = [sys.executable, "-m", "lakeview.cli"]
HOUR = 3_600_000


def test_history_keeps_samples_and_commits_within_retention_only(tmp_path: Path) -> None:
    history = ConsoleHistory(tmp_path / "history.db", retention_ms=2 * HOUR)
    now = 10 * HOUR
    history.record(
        now - 3 * HOUR,
        [ViewSample("v", now - 3 * HOUR, 900, 1000, "fresh")],
        [("v", 0, now - 3 * HOUR, 5, 5)],
        [SourceSample("s", now - 3 * HOUR, 4, 400, 0)],
    )
    history.record(
        now,
        [ViewSample("v", now, 1500, 1000, "late", "FALLING_BEHIND")],
        [("v", 1, now - 30_000, 7, 6), ("v", 2, now - 10_000, 3, 3), ("v", 1, now, 99, 99)],
        [SourceSample("s", now, 1, 100, 2)],
        {"s": ({"malformed row": 2}, [{"epoch": 2, "record": "x"}])},
    )
    assert [s.lag_ms for s in history.view_samples("v", 0)] == [1500]  # the 3-hour-old sample is gone
    assert history.view_samples("v", 0)[0].reason == "FALLING_BEHIND"
    # Epochs 1 and 2 in one minute; epoch 1 recorded again is kept as first recorded.
    minute = (now - 30_000) // 60_000 * 60_000
    assert history.commit_rates("v", 0) == [{"at_ms": minute, "epochs": 2, "rows_in": 10, "rows_out": 9}]
    assert [(s.pending_files, s.pending_bytes) for s in history.source_samples("s", 0)] == [(1, 100)]
    assert history.quarantine("s") == ({"malformed row": 2}, [{"epoch": 2, "record": "x"}])


def test_console_config_has_defaults_and_refuses_bad_values(tmp_path: Path) -> None:
    project = parse_project({}, root=tmp_path)
    assert project.console.history_retention.seconds == 2 * 86_400 and project.console.sample_interval.seconds == 5
    with pytest.raises(ConfigError, match="history_retention.*duration"):
        parse_project({"console": {"history_retention": "manual"}}, root=tmp_path)
    unknown = r"unknown key in \[console\]; valid keys: history_retention, sample_interval"
    with pytest.raises(ConfigError, match=unknown):
        parse_project({"console": {"retention": "1d"}}, root=tmp_path)


def test_ui_prints_the_url_and_serve_serves_the_console_and_its_history(tmp_path: Path) -> None:
    port = free_port()
    subprocess.run([*LAKEVIEW, "init", str(tmp_path), "--port", str(port)], check=True, capture_output=True)
    with (tmp_path / "lakeview.toml").open("a") as config:
        config.write('\n[console]\nsample_interval = "1s"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    url = f"http://127.0.0.1:{port}/ui/"
    idle = subprocess.run([*LAKEVIEW, "ui", "-p", str(tmp_path)], capture_output=True, text=True, env=env, timeout=60)
    assert idle.returncode == 0 and f"console: {url}" in idle.stdout and "start `lakeview up`" in idle.stdout
    serve = subprocess.Popen(
        [*LAKEVIEW, "serve", "-p", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:

        def page() -> httpx.Response | None:
            try:
                response = httpx.get(url, timeout=2)
            except httpx.HTTPError:
                return None
            return response if response.status_code == 200 else None

        assert "Lakeview console" in wait_for(page, 60, "the console page").text
        for asset in ("console.js", "draw.js", "console.css"):  # shipped in the package, served from it
            assert httpx.get(f"{url}{asset}").status_code == 200
        lineage = httpx.get(f"http://127.0.0.1:{port}/lakeview/v1/lineage").json()
        assert {n["id"] for n in lineage["nodes"]} >= {"source:orders", "view:sales_by_product", "target:rest"}
        bad = httpx.get(f"http://127.0.0.1:{port}/lakeview/v1/views/sales_by_product/history?window=1w")
        assert bad.status_code == 400 and "use one of 1h, 1d" in bad.json()["error"]["message"]
        running = subprocess.run(
            [*LAKEVIEW, "ui", "-p", str(tmp_path)], capture_output=True, text=True, env=env, timeout=60
        )
        assert running.returncode == 0 and f"console: {url}" in running.stdout
        assert "start `lakeview up`" not in running.stdout

        def sampled() -> list | None:  # serve samples every second; it runs no view, so: stopped
            history = httpx.get(f"http://127.0.0.1:{port}/lakeview/v1/views/sales_by_product/history").json()
            return history["lag"] or None

        assert wait_for(sampled, 30, "a history sample")[0][2] == "stopped"
    finally:
        serve.terminate()
        serve.wait(timeout=30)
