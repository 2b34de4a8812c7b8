"""From laptop to cluster: `lakeview up --spark-master` runs the view's job on a real Spark
standalone master and worker (pyspark's own bin/spark-class, bound to 127.0.0.1).

Runs `lakeview up` in a subprocess: a driver for a cluster cannot share this process with the
test session's local Spark."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from catalog_api.ops.status import ViewStatus, view_statuses
from catalog_api.server import free_port
from catalog_api.store.catalog import open_store
from lakeview.cli.generator import land_json, make_orders
from lakeview.project import load_project
from tests.jvm_archive import JAVA_OPTIONS
from tests.waiting import wait_for

CLI = [sys.executable, "-m", "lakeview.cli"]


def spark_class(*args: str, log: Path) -> subprocess.Popen:
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    env["SPARK_DAEMON_JAVA_OPTS"] = JAVA_OPTIONS  # the tests' short-lived JVMs: C1 and the serial collector
    return subprocess.Popen(
        [str(home / "bin" / "spark-class"), *args],
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture()
def standalone_cluster(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A Spark master and one worker (1 core, 1 GB) on loopback; yields (master URL, work dir)."""
    port = free_port("127.0.0.1")
    master = spark_class(
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--webui-port",
        "0",
        log=tmp_path / "master.log",
    )
    url = f"spark://127.0.0.1:{port}"
    work = tmp_path / "work"
    worker = None
    try:
        wait_for(lambda: "ALIVE" in (tmp_path / "master.log").read_text(), 60, "the Spark master")
        worker = spark_class(
            "org.apache.spark.deploy.worker.Worker",
            url,
            "--host",
            "127.0.0.1",
            "--webui-port",
            "0",
            "--cores",
            "1",
            "--memory",
            "1g",
            "--work-dir",
            str(work),
            log=tmp_path / "worker.log",
        )
        wait_for(
            lambda: "Successfully registered with master" in (tmp_path / "worker.log").read_text(), 60, "the worker"
        )
        yield url, work
    finally:
        if worker is not None:
            stop(worker)
        stop(master)


def test_up_runs_the_view_on_a_standalone_cluster(standalone_cluster: tuple[str, Path], tmp_path: Path) -> None:
    url, work = standalone_cluster
    project = tmp_path / "project"
    port = free_port("127.0.0.1")
    subprocess.run(
        [*CLI, "init", str(project), "--port", str(port), "--cadence", "1s"], check=True, capture_output=True
    )
    up = subprocess.Popen(
        [*CLI, "up", "-p", str(project), "--spark-master", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        orders = make_orders(40, seed=3)
        land_json(project / "landing" / "orders", "a.json", orders)

        config = load_project(project)

        def committed() -> ViewStatus | None:
            [view] = view_statuses(config)  # what `lakeview status` in another shell shows
            return view if view.state == "committed" else None

        try:
            view = wait_for(committed, 240, "the first snapshot through the cluster")
        except AssertionError:
            up.kill()
            raise AssertionError(f"no commit; `lakeview up` said:\n{up.communicate()[0][-3000:]}") from None
        assert view.running and view.rows_in_total == 40
        up.send_signal(signal.SIGINT)
        output, _ = up.communicate(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    assert up.returncode == 0, output
    assert f"spark: {url}" in output
    # The worker launched an executor for the app: the batch ran on the cluster, not locally.
    apps = [p for p in work.iterdir() if re.match(r"app-\d+-\d+", p.name)] if work.exists() else []
    assert apps and any((app / "0" / "stderr").exists() for app in apps), output
    rows = open_store(config).load_table(("analytics", "sales_by_product")).scan().to_arrow()
    assert sum(rows.column("orders").to_pylist()) == 40
