"""Issue #16 findings 5 and 7: one bind rule for every way the catalog starts. The ASGI factory under
a real uvicorn process refuses a non-loopback bind without auth (``--host``, ``UVICORN_HOST``, with
workers); an app served without auth by other means answers 403 off loopback; ``::1`` works."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from catalog_api.server import CatalogServer, free_port
from catalog_api.store.catalog import CatalogStore

REFUSAL = "refusing to serve the catalog (ASGI factory) on"


def factory_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "LAKEVIEW_CATALOG_STORE": f"sqlite:///{tmp_path / 'c.db'}",
        "LAKEVIEW_WAREHOUSE": str(tmp_path / "wh"),
        **extra,
    }


def run_uvicorn(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "uvicorn", "--factory", "catalog_api.asgi:create_app", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "args, env",
    [
        (["--host", "0.0.0.0"], {}),
        (["--host=0.0.0.0", "--workers", "2"], {}),
        ([], {"UVICORN_HOST": "0.0.0.0"}),
        (["--host", "::"], {}),
    ],
)
def test_asgi_factory_refuses_a_non_loopback_bind_without_auth(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    result = run_uvicorn([*args, "--port", str(free_port())], factory_env(tmp_path, **env))
    assert result.returncode != 0 or "--workers" in args  # workers: the refusing worker stops its supervisor
    assert REFUSAL in result.stderr and "without auth" in result.stderr and "[auth]" in result.stderr


def non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outbound interface
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_an_app_served_without_auth_answers_403_off_loopback(tmp_path: Path) -> None:
    """A server started around the factory's command-line check still serves only loopback connections."""
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    port = free_port(address)
    code = (
        "import uvicorn; from catalog_api.asgi import create_app; "
        f"uvicorn.run(create_app(), host={address!r}, port={port}, log_level='warning')"
    )
    process = subprocess.Popen([sys.executable, "-c", code], env=factory_env(tmp_path), stderr=subprocess.PIPE)
    try:
        response = None
        for _ in range(600):
            try:
                response = httpx.get(f"http://{address}:{port}/iceberg/v1/config", timeout=5)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
                time.sleep(0.1)
        assert response is not None
        assert response.status_code == 403
        assert "serves loopback only" in response.json()["error"]["message"]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_uvicorn_factory_on_loopback_serves(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "--factory", "catalog_api.asgi:create_app", "--port", str(port)]
    process = subprocess.Popen(command, env=factory_env(tmp_path), stderr=subprocess.PIPE)
    try:
        for _ in range(600):
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/iceberg/v1/config", timeout=5).status_code == 200
                break
            except httpx.TransportError:
                assert process.poll() is None
                time.sleep(0.1)
        else:
            pytest.fail("uvicorn did not serve the catalog")
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_ipv6_loopback_with_a_free_port(tmp_path: Path) -> None:
    try:
        socket.socket(socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 on this machine")
    store = CatalogStore(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "wh", "lakeview")
    with CatalogServer(store, host="::1", port=0) as server:
        assert server.uri == f"http://[::1]:{server.port}/iceberg"
        from pyiceberg.catalog.rest import RestCatalog

        catalog = RestCatalog("v6", uri=server.uri, warehouse="lakeview")
        catalog.create_namespace("six")
        assert ("six",) in catalog.list_namespaces()
    store.close()
