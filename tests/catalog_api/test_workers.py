"""The catalog's worker launcher (``python -m catalog_api.workers``): connections opened together are spread over
the workers (uvicorn's shared socket gave one worker nearly all of them), the workers are one catalog, SIGTERM
stops them all (a killed launcher takes them along), and a non-loopback host without auth is refused."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from catalog_api.server import free_port
from catalog_api.workers import sockets_per_process, wait_listening
from tests.catalog_api.test_concurrency import append_snapshot_body, create


def launch(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "LAKEVIEW_CATALOG_STORE": f"sqlite:///{tmp_path / 'c.db'}",
        "LAKEVIEW_WAREHOUSE": str(tmp_path),
    }
    command = [sys.executable, "-m", "catalog_api.workers", *args]
    return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)


def wait_served(base: str) -> None:
    for _ in range(300):
        try:
            if httpx.get(f"{base}/v1/config", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError(f"{base} did not start")


def test_connections_are_spread_over_workers_that_are_one_catalog(tmp_path: Path) -> None:
    port = free_port()
    launcher = launch(tmp_path, "--workers", "2", "--port", str(port))
    try:
        base = f"http://127.0.0.1:{port}/iceberg"
        wait_served(base)
        wait_listening(port, 2)
        api = f"{base}/v1/lakeview"
        location = create(api, "ns")["metadata"]["location"]
        clients = [httpx.Client(base_url=api, timeout=30) for _ in range(32)]  # 32 keep-alive connections
        for i, client in enumerate(clients):  # each commits through its own connection; the next one sees it
            parent = None if i == 0 else i
            assert (
                client.post(
                    "/namespaces/ns/tables/t", json=append_snapshot_body(parent, i + 1, location, i + 1)
                ).status_code
                == 200
            )
            assert (
                clients[(i + 1) % 32].get("/namespaces/ns/tables/t").json()["metadata"]["current-snapshot-id"] == i + 1
            )
        held = sockets_per_process(port)
        assert len(held) == 2 and min(held.values()) >= 4, held  # 32 over 2 workers by hash: < 4 is ~3e-6 likely
        for client in clients:
            client.close()
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=30) == 0
        with socket.socket() as probe:  # every worker is gone: the port is free
            assert probe.connect_ex(("127.0.0.1", port)) != 0
    finally:
        launcher.kill()
        launcher.wait(timeout=30)


def test_a_non_loopback_host_without_auth_is_refused(tmp_path: Path) -> None:
    launcher = launch(tmp_path, "--workers", "2", "--host", "0.0.0.0", "--port", str(free_port()))
    _, stderr = launcher.communicate(timeout=120)
    assert launcher.returncode != 0
    assert "refusing to serve the catalog (ASGI factory) on 0.0.0.0 without auth" in stderr


def test_workers_go_when_the_launcher_is_killed(tmp_path: Path) -> None:
    port = free_port()
    launcher = launch(tmp_path, "--workers", "2", "--port", str(port))
    wait_served(f"http://127.0.0.1:{port}/iceberg")
    launcher.kill()  # SIGKILL: no chance to stop its workers itself
    launcher.wait(timeout=30)
    for _ in range(300):  # the workers get SIGTERM from the kernel (PR_SET_PDEATHSIG) and stop
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"a worker still serves port {port} after its launcher was killed")
