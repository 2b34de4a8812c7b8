"""The `lakeview` command as a user runs it (subprocesses, real files)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LAKEVIEW = [sys.executable, "-m", "lakeview.cli"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LAKEVIEW, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_cli_start_does_not_import_spark() -> None:
    code = "import sys, lakeview.cli; print(any(m.startswith(('pyspark', 'pyiceberg', 'duckdb')) for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_every_command_has_help() -> None:
    for command in ("init", "up", "serve", "ui", "status", "query", "refresh", "verify", "demo"):
        result = run(command, "--help")
        assert result.returncode == 0, result.stderr
        assert "Usage" in result.stdout


def test_init_then_status_shows_views_not_created(tmp_path: Path) -> None:
    result = run("init", str(tmp_path / "proj"), "--cadence", "10s")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "proj" / "lakeview.toml").exists() and (tmp_path / "proj" / "generate_orders.py").exists()
    status = run("status", "--json", "-p", str(tmp_path / "proj"))
    assert status.returncode == 0, status.stderr
    [view] = json.loads(status.stdout)
    assert view["view"] == "sales_by_product" and view["cadence"] == "10s" and view["state"].startswith("not created")


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    assert run("init", str(tmp_path)).returncode == 0
    result = run("init", str(tmp_path))
    assert result.returncode == 2 and "already exists here; pass --force" in result.stderr


def test_config_error_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "lakeview.toml").write_text('[views.v]\nsql = "SELECT a, SUM(b) AS s FROM nowhere GROUP BY a"\n')
    result = run("status", "-p", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "views.v.sql: reads 'nowhere'" in result.stderr
    assert "Traceback" not in result.stderr


def test_generator_script_lands_orders(tmp_path: Path) -> None:
    run("init", str(tmp_path))
    result = subprocess.run(
        [sys.executable, "generate_orders.py", "25", "7"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    [landed] = list((tmp_path / "landing" / "orders").glob("*.json"))
    lines = landed.read_text().splitlines()
    assert len(lines) == 25 and {"order_id", "product_id", "quantity", "ts"} == set(json.loads(lines[0]))
    # Without a seed the script seeds from the clock (large order ids) and still works.
    again = subprocess.run([sys.executable, "generate_orders.py", "5"], cwd=tmp_path, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert len(list((tmp_path / "landing" / "orders").glob("*.json"))) == 2
