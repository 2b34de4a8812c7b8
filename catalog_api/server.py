"""Run the catalog under uvicorn in a background thread (embedded mode and tests)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx
import uvicorn

from catalog_api.app import build_app
from catalog_api.auth.authenticator import Authenticator
from catalog_api.auth.bind_guard import refuse_open_bind
from catalog_api.store.catalog import CatalogStore
from lakeview.errors import SetupError


class CatalogServer:
    """The catalog service on ``host:port``; ``port=0`` picks a free port."""

    def __init__(
        self,
        store: CatalogStore,
        host: str = "127.0.0.1",
        port: int = 0,
        authenticator: Authenticator | None = None,
        **app_options: Any,
    ) -> None:
        refuse_open_bind(host, authenticator is not None)
        self.store = store
        self.host = host
        self.port = port or free_port(host)
        app = build_app(store, authenticator=authenticator, **app_options)
        config = uvicorn.Config(app, host=host, port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def uri(self) -> str:
        return f"http://{self.authority}/iceberg"

    @property
    def authority(self) -> str:
        """``host:port``, with an IPv6 host in brackets (``[::1]:8181``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self, timeout: float = 15.0) -> CatalogServer:
        if _port_taken(self.host, self.port):
            raise SetupError(f"port {self.port} on {self.host} is in use; set [server] port in lakeview.toml")
        self._thread = threading.Thread(target=self._server.run, name="lakeview-catalog", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://{self.authority}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if not self._thread.is_alive():
                break
            time.sleep(0.05)
        raise SetupError(f"the catalog did not start on {self.host}:{self.port}")

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def serve_forever(self) -> None:
        """Run in the calling thread until Ctrl-C."""
        self._server.run()

    def __enter__(self) -> CatalogServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` right now (servers in tests and the demo bind loopback; IPv6 too)."""
    with socket.socket(_family(host)) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _port_taken(host: str, port: int) -> bool:
    with socket.socket(_family(host)) as sock:
        return sock.connect_ex((host, port)) == 0


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][0]
    except socket.gaierror:
        return socket.AF_INET
