"""deploy/: what can be checked without a Docker engine or a Kubernetes cluster.

The manifests and the dashboard parse; every `lakeview` command they run is a real command
with valid flags (parsed by the CLI itself); the projects they mount load; the image's entry
point runs `lakeview` and pyspark's Spark tools; the Dockerfile copies only paths that exist."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import typer
import yaml

# typer 0.29 vendors click as typer._click: the CLI's commands and usage errors are that one's.
from typer._click import exceptions as click_errors

from lakeview.cli.main import app
from lakeview.project import load_project, parse_project

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ROOT = DEPLOY.parent
SPARK_TOOLS = {"spark-class", "spark-submit", "driver", "executor"}


def check_lakeview_args(args: list[str], where: str) -> None:
    """Parse ``lakeview ARGS`` with the real CLI (no command runs): unknown commands or flags fail."""
    group = typer.main.get_command(app)
    name, *rest = args
    context = group.make_context("lakeview", [name])
    command = group.get_command(context, name)
    assert command is not None, f"{where}: `lakeview {name}` is not a command"
    try:
        command.make_context(name, list(rest), parent=context)
    except click_errors.UsageError as exc:
        raise AssertionError(f"{where}: `lakeview {shlex.join(args)}`: {exc.format_message()}") from None


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def k8s_documents() -> list[dict]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        if path.name == "kustomization.yaml":
            assert set(yaml.safe_load(path.read_text())["resources"]) == {
                p.name for p in (DEPLOY / "k8s").glob("*.yaml")
            } - {path.name}
            continue
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def lakeview_invocations() -> list[tuple[str, list[str]]]:
    """Every (where, args) the manifests pass to the Lakeview image's entry point."""
    found = []
    for name, service in compose()["services"].items():
        if str(service.get("image", "")).startswith("lakeview") and "entrypoint" not in service:
            found.append((f"compose service {name}", [str(a) for a in service["command"]]))
    for doc in k8s_documents():
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in spec.get("containers", []):
            if str(container.get("image", "")).startswith("lakeview"):
                found.append((f"k8s {doc['kind']} {doc['metadata']['name']}", [str(a) for a in container["args"]]))
    return found


def test_manifests_and_dashboard_parse() -> None:
    services = compose()["services"]
    assert {"postgres", "seaweedfs", "spark-master", "spark-worker", "catalog", "views", "trino"} <= set(services)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in k8s_documents()}
    assert ("Deployment", "lakeview-catalog") in kinds and ("Job", "lakeview-views-submit") in kinds
    [catalog] = [
        d for d in k8s_documents() if d["kind"] == "Deployment" and d["metadata"]["name"] == "lakeview-catalog"
    ]
    assert catalog["spec"]["replicas"] >= 2
    for doc in k8s_documents():
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "lakeview-spark-pod-templates":
            for template in doc["data"].values():
                assert yaml.safe_load(template)["kind"] == "Pod"
    dashboard = json.loads((DEPLOY / "dashboards" / "lakeview.json").read_text())
    first = dashboard["panels"][0]
    assert "SLO compliance" in first["title"] and "lakeview_view_slo_compliance" in first["targets"][0]["expr"]
    metric_names = set(re.findall(r"lakeview_[a-z_]+", json.dumps(dashboard)))
    exported = {
        "lakeview_view_slo_compliance",
        "lakeview_view_lag_seconds",
        "lakeview_view_target_lag_seconds",
        "lakeview_view_degraded",
        "lakeview_view_commits_total",
        "lakeview_commit_seconds_bucket",
        "lakeview_view_rows_in_total",
        "lakeview_view_rows_out_total",
        "lakeview_view_rows_quarantined_total",
        "lakeview_view_pending_files",
        "lakeview_catalog_request_seconds_bucket",
    }
    assert metric_names <= exported, f"the dashboard queries metrics nobody exports: {metric_names - exported}"


def test_every_lakeview_command_in_the_manifests_is_real() -> None:
    invocations = lakeview_invocations()
    assert len(invocations) >= 4
    checked = 0
    for where, args in invocations:
        if args[0] == "spark-submit":  # the app after the .py file is `lakeview up ARGS`
            app_file = next(i for i, a in enumerate(args) if a.endswith("lakeview_views.py"))
            assert (ROOT / args[app_file].removeprefix("local:///opt/lakeview/")).exists()
            args = ["up", *args[app_file + 1 :]]
        elif args[0] in SPARK_TOOLS:
            continue
        check_lakeview_args(args, where)
        checked += 1
    assert checked >= 3
    for where, args in [
        (
            "systemd unit",
            shlex.split(re.search(r"ExecStart=\S+/lakeview (.*)", (DEPLOY / "lakeview.service").read_text()).group(1)),
        )
    ]:
        check_lakeview_args(args, where)


def test_bad_flags_are_caught_by_the_check() -> None:
    try:
        check_lakeview_args(["up", "--spark-mastr", "spark://x:7077"], "self-test")
    except AssertionError as exc:
        assert "--spark-mastr" in str(exc)
    else:
        raise AssertionError("an unknown flag passed the check")


def test_the_projects_the_manifests_mount_load() -> None:
    compose_project = load_project(DEPLOY / "compose" / "lakeview.toml")
    assert compose_project.spark.master == "spark://spark-master:7077" and compose_project.is_s3
    import tomllib

    [config_map] = [
        d for d in k8s_documents() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "lakeview-config"
    ]
    k8s_project = parse_project(tomllib.loads(config_map["data"]["lakeview.toml"]), file="k8s lakeview.toml")
    assert k8s_project.spark.master.startswith("k8s://") and k8s_project.catalog_store_url.startswith("postgresql")
    # Same sources and views as the compose project: only where it runs differs.
    assert k8s_project.views == compose_project.views and k8s_project.sources == compose_project.sources


def test_the_image_entry_point_runs_lakeview_and_spark_tools() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", dockerfile, re.M).group(1))
    assert entrypoint[-1] == "/usr/local/bin/docker-entrypoint.sh"
    for source in re.findall(r"^COPY (\S+) ", dockerfile, re.M):
        assert (ROOT / source).exists(), f"Dockerfile copies {source}, which is not in the repository"
    import pyspark

    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SPARK_HOME": str(Path(pyspark.__file__).parent)}
    script = str(DEPLOY / "docker-entrypoint.sh")
    help_out = subprocess.run(["sh", script, "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert help_out.returncode == 0 and "Usage: lakeview" in help_out.stdout
    spark = subprocess.run(
        ["sh", script, "spark-submit", "--version"], env=env, capture_output=True, text=True, timeout=120
    )
    assert "version 3.5.9" in spark.stdout + spark.stderr
