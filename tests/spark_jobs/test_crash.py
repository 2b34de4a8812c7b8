"""Exactly once under SIGKILL: `lakeview refresh` runs as a separate process and kills itself
(SIGKILL, through the LAKEVIEW_FAULT hook) while reading, after the state tables and the
view's data files are written but before the view's catalog commit, and after every commit
but before Spark's checkpoint records the batch. Each restart finishes the work; the view
equals the recompute and no table holds an epoch twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from catalog_api.store.catalog import open_store
from lakeview.config.models import ProjectConfig
from lakeview.ivm import oracle
from lakeview.project import parse_project
from tests.spark_jobs.test_changes import EPOCHS, FEED, SCHEMA, land

SQL = "SELECT product_id, SUM(quantity) AS total, MIN(quantity) AS lo, COUNT(*) AS n FROM changes GROUP BY product_id"
ROOT = Path(__file__).resolve().parents[2]


def refresh(project_dir: Path, fault: str | None, view: str = "crashy") -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LAKEVIEW_FAULT", None)
    if fault:
        env["LAKEVIEW_FAULT"] = fault
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakeview.cli", "refresh", view, "-p", str(project_dir)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the JVM this process started, if it outlived it
        except ProcessLookupError:
            pass
    if fault is None:
        assert proc.returncode == 0, out.decode()[-3000:]
    return proc.returncode


def test_sigkill_at_each_point_then_restart_equals_recompute(spark, tmp_path: Path) -> None:
    data = {
        "lake": {"warehouse": "lake"},
        "server": {"port": 0},
        "sources": {"changes": {"format": "json", "path": "landing", "schema": SCHEMA, "changes": FEED}},
        "views": {"crashy": {"sql": SQL, "cadence": "manual", "namespace": "crash"}},
    }
    project = project_on_disk(tmp_path, data)
    landing = project.source_path("changes")
    land(landing, "000.json", EPOCHS[0])
    land(landing, "001.json", EPOCHS[1])

    assert refresh(tmp_path, "reading:0") == -signal.SIGKILL
    assert refresh(tmp_path, "before_view_commit:0") == -signal.SIGKILL
    land(landing, "002.json", EPOCHS[2])
    assert refresh(tmp_path, "after_commit:1") == -signal.SIGKILL
    from tests.spark_jobs.test_view_dag import refresh_in_process

    refresh_in_process(spark, project, ["crashy"])  # the last restart in this process: one JVM start less

    store = open_store(project)
    view = store.load_table(("crash", "crashy"))
    comparison = oracle.compare(view.scan().to_arrow(), oracle.recompute(project, "crashy"))
    assert comparison.equal, comparison.describe()
    for name in ("crashy", "__lv_state_crashy_g_log", "__lv_state_crashy_src_changes"):  # view, state log, mirror
        table = store.load_table(("crash", name))
        epochs = Counter(s.summary.additional_properties.get("lakeview.epoch") for s in table.snapshots() if s.summary)
        epochs.pop(None, None)
        assert set(epochs.values()) == {1}, f"{name}: an epoch committed twice: {epochs}"
        assert set(epochs) == {"0", "1"}, f"{name}: {sorted(epochs)}"


STATS_SQL = (
    "SELECT product_id, AVG(quantity) AS avg_q, MIN(order_id) AS first_order, MAX(quantity) AS hi, "
    "COUNT(DISTINCT quantity) AS sizes FROM changes GROUP BY product_id"
)
STATS_TABLES = ("stats", "__lv_state_stats_g_log", "__lv_state_stats_src_changes")  # the view, its state log, mirror


def test_sigkill_before_the_one_transaction_leaves_every_table_at_the_last_epoch(spark, tmp_path: Path) -> None:
    """The view, its state log (group records, value multisets) and its change feed's mirror commit an epoch in ONE
    catalog transaction: killed with every table's files written but before it, none of them holds the
    epoch (committed one by one, the state tables would be ahead of the view); the restart commits it to
    all, once, and the view equals the recompute."""
    data = {
        "lake": {"warehouse": "lake"},
        "server": {"port": 0},
        "sources": {"changes": {"format": "json", "path": "landing", "schema": SCHEMA, "changes": FEED}},
        "views": {"stats": {"sql": STATS_SQL, "cadence": "manual", "namespace": "crash"}},
    }
    project = project_on_disk(tmp_path, data)
    landing = project.source_path("changes")
    land(landing, "000.json", EPOCHS[0])
    from tests.spark_jobs.test_view_dag import refresh_in_process

    refresh_in_process(spark, project, ["stats"])
    land(landing, "001.json", EPOCHS[1])
    assert refresh(tmp_path, "before_view_commit:1", view="stats") == -signal.SIGKILL

    store = open_store(project)
    assert {name: epochs_of(store, name) for name in STATS_TABLES} == dict.fromkeys(STATS_TABLES, Counter({"0": 1}))

    refresh_in_process(spark, project, ["stats"])
    comparison = oracle.compare(
        store.load_table(("crash", "stats")).scan().to_arrow(), oracle.recompute(project, "stats")
    )
    assert comparison.equal, comparison.describe()
    assert {name: epochs_of(store, name) for name in STATS_TABLES} == dict.fromkeys(
        STATS_TABLES, Counter({"0": 1, "1": 1})
    )


def epochs_of(store, name: str) -> Counter:
    """How many snapshots of the table ``crash.<name>`` stamp each epoch."""
    table = store.load_table(("crash", name))
    epochs = Counter(s.summary.additional_properties.get("lakeview.epoch") for s in table.snapshots() if s.summary)
    epochs.pop(None, None)
    return epochs


def project_on_disk(tmp_path: Path, data: dict) -> ProjectConfig:
    """``data`` written as ``tmp_path/lakeview.toml`` (for `lakeview` run in another process) and parsed."""
    (tmp_path / "lakeview.toml").write_text(_toml(data))
    return parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)


def _toml(data: dict, prefix: str = "") -> str:
    import json

    lines, tables = [], []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    out = "\n".join(lines) + "\n"
    for key, value in tables:
        name = f"{prefix}{key}"
        if all(isinstance(v, dict) for v in value.values()) and value:
            out += _toml(value, prefix=f"{name}.")
        else:
            out += f"[{name}]\n" + _toml(value, prefix=f"{name}.")
    return out
