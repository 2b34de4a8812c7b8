"""`lakeview demo` end to end (short cadence), then the CLI on the lake it leaves behind."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO
from pathlib import Path

from rich.console import Console

from lakeview.cli.demo import run_demo


def test_demo_then_query_and_verify_from_the_cli(spark, tmp_path: Path) -> None:
    out = StringIO()
    directory = tmp_path / "demo"
    assert run_demo(directory, batches=3, orders=60, cadence="1s", console=Console(file=out, width=200))
    text = out.getvalue()
    assert text.count("matches the generated orders") == 3
    assert "lakeview up" in text and "ATTACH 'lakeview' AS lake (TYPE iceberg" in text

    # No catalog is running now: `query` starts a temporary one and reads the snapshot via DuckDB.
    query = subprocess.run(
        [
            sys.executable,
            "-m",
            "lakeview.cli",
            "query",
            "SELECT SUM(orders) AS n FROM lake.analytics.sales_by_product",
            "-p",
            str(directory),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert query.returncode == 0, query.stderr
    assert "180" in query.stdout  # 3 batches x 60 orders

    verify = subprocess.run(
        [sys.executable, "-m", "lakeview.cli", "verify", "sales_by_product", "-p", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stderr
    assert "(3 files): equal" in verify.stdout

    bad = subprocess.run(
        [sys.executable, "-m", "lakeview.cli", "query", "SELECT * FROM lake.analytics.nope", "-p", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "query failed" in bad.stderr and "nope" in bad.stderr


def test_demo_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    import pytest

    from lakeview.errors import LakeviewError

    with pytest.raises(LakeviewError, match="was not made by `lakeview demo`"):
        run_demo(tmp_path, console=Console(file=StringIO()))
    assert (tmp_path / "precious.txt").read_text() == "keep me"
